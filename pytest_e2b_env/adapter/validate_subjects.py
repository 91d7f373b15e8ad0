"""The plugin object of one ``pytest-e2b-env validate`` run: which subjects it validates.

``validate`` runs pytest in the project with the project's own config; this object, registered
for that run only, decides the subjects before the e2b plugin resolves its settings (xdist workers
get them from the controller); ``validate`` passes ``--e2b-catalog-only`` so that pytest collects
(and imports) none of the project's own test files.
"""

from __future__ import annotations

import pytest

from pytest_e2b_env.adapter.fixtures import REFERENCE_EPISODE, REFERENCE_REWARD
from pytest_e2b_env.extras import missing

KINDS = ("reward", "episode")
#: the bundled reference code, validated when no subject is named or configured anywhere
REFERENCE = {"reward": REFERENCE_REWARD, "episode": REFERENCE_EPISODE}


class ValidateSubjects:
    """pytest plugin of one ``validate`` run: decides which subjects run."""

    def __init__(self, named: dict[str, str | None], only: str) -> None:
        self.named = named
        self.only = only

    @pytest.hookimpl(tryfirst=True)
    def pytest_configure(self, config: pytest.Config) -> None:
        """Before the e2b plugin resolves its settings: set each subject option (named > ini > reference)."""
        chosen = {kind: self.named[kind] or str(config.getini(f"e2b_{kind}_subject") or "") for kind in KINDS}
        if not any(chosen.values()):
            chosen = dict(REFERENCE)
            if self.only == "all" and missing("episode"):
                # A base install validates the reference reward; asking for the episode names the extra.
                chosen["episode"] = ""
        kind = self.only
        if kind != "all" and not chosen[kind]:
            raise pytest.UsageError(
                f"--subject {kind}: no {kind} subject is set; name one with --{kind}-subject "
                f"MODULE:ATTR or set e2b_{kind}_subject in {config.inipath or 'your pytest config'}"
            )
        for other in KINDS:
            keep = kind in ("all", other)
            setattr(config.option, f"e2b_{other}_subject", chosen[other] if keep else "")
