"""Fixtures for the plugin tests: pytester projects with a tiny subject and case file."""

from __future__ import annotations

import textwrap

import e2b  # noqa: F401  (imported once here: pytester's in-process runs would re-import it and protobuf refuses)
import pytest
from plugin_helpers import CASES, REWARD_MODULE

import pytest_e2b_env.catalog.runner  # noqa: F401  (same reason: keep one copy of the catalog modules)


def write_project(
    pytester: pytest.Pytester, subject: str = "tinyreward:make_reward", extra: str = ""
) -> None:
    """A user project: its own reward module and case file, ini keys pointing at them."""
    pytester.makepyfile(tinyreward=REWARD_MODULE)
    (pytester.path / "mycases").mkdir(exist_ok=True)
    (pytester.path / "mycases" / "reward.toml").write_text(CASES)
    pytester.makeini(
        textwrap.dedent(
            f"""
            [pytest]
            e2b_reward_subject = {subject}
            e2b_cases = mycases
            pythonpath = .
            asyncio_default_fixture_loop_scope = function
            """
        )
        + extra
    )


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    """A pytester project whose ini points the catalog at its own tiny reward module."""
    write_project(pytester)
    return pytester
