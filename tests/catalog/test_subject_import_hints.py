"""A subject whose import misses a module an extra provides says which extra to install."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_e2b_env.catalog.contract import import_spec
from pytest_e2b_env.errors import ConfigError


def test_a_missing_openenv_names_the_episode_extra(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """importing a subject that imports OpenEnv without it: the error ends with the [episode] install line."""
    (tmp_path / "needs_openenv.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'openenv'\", name='openenv')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ConfigError) as caught:
        import_spec("needs_openenv:Env", "e2b_episode_subject", "episode")
    assert str(caught.value).endswith(
        "ModuleNotFoundError: No module named 'openenv' "
        "(it comes with the [episode] extra: pip install 'pytest-e2b-env[episode]')"
    )


def test_a_missing_module_of_no_extra_gets_no_hint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A module no extra provides is reported as it is, with no install line."""
    (tmp_path / "needs_other.py").write_text("import not_a_module_anywhere_xyz\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ConfigError) as caught:
        import_spec("needs_other:Env", "e2b_episode_subject", "episode")
    assert str(caught.value).endswith("No module named 'not_a_module_anywhere_xyz'")
