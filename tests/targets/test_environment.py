"""Every environment variable is declared once, in pytest_e2b_env/settings.py, and read nowhere else."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import pytest_e2b_env
from pytest_e2b_env import settings
from pytest_e2b_env.settings import ENVIRONMENT, TargetSettings

PACKAGE = Path(pytest_e2b_env.__file__).parent
SETTINGS = PACKAGE / "settings.py"
DOCS = Path(__file__).resolve().parents[2] / "docs" / "plugin.md"
#: A string that is an environment variable's name (or the ``NAME=`` of a line announcing one).
NAME = re.compile(r"^(PYTEST_E2B_ENV_|E2B_)[A-Z0-9_]+=?$")


def _modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if p != SETTINGS)


def _names_used(path: Path, root: Path = PACKAGE) -> list[str]:
    """Where ``path`` spells a variable's name or reads one through an ``ENV_*`` constant."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and NAME.match(node.value):
            found.append(f"{path.relative_to(root)}:{node.lineno}: {node.value!r}")
        # os.environ[ENV_X], environ.get(ENV_X), os.getenv(ENV_X): a read that bypasses settings.
        key = None
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
            key = node.slice
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.args
            and node.func.attr in ("get", "getenv", "pop", "setdefault")
        ):
            key = node.args[0]
        name = key.id if isinstance(key, ast.Name) else key.attr if isinstance(key, ast.Attribute) else ""
        if name.startswith("ENV_"):
            found.append(f"{path.relative_to(root)}:{node.lineno}: reads {name}")
    return found


def test_no_module_but_settings_names_a_variable() -> None:
    """No package module spells an E2B_*/PYTEST_E2B_ENV_* name or reads one past pytest_e2b_env.settings."""
    offenders = [hit for path in _modules() for hit in _names_used(path)]
    assert offenders == [], "read these through pytest_e2b_env.settings:\n" + "\n".join(offenders)


def test_the_check_catches_a_direct_read(tmp_path: Path) -> None:
    """The source check flags a literal name and a read through an ENV_* constant."""
    bad = tmp_path / "bad.py"
    bad.write_text('import os\nos.environ.get("PYTEST_E2B_ENV_RUN")\nos.environ[ENV_API_KEY]\n')
    assert sorted(_names_used(bad, tmp_path)) == [
        "bad.py:2: 'PYTEST_E2B_ENV_RUN'",
        "bad.py:3: reads ENV_API_KEY",
    ]


def test_every_constant_is_declared_with_a_meaning() -> None:
    """Each ENV_* constant of pytest_e2b_env.settings is in ENVIRONMENT with a one-line meaning."""
    constants = {v for k, v in vars(settings).items() if k.startswith("ENV_")}
    assert constants == set(ENVIRONMENT)
    for name, meaning in ENVIRONMENT.items():
        assert meaning.strip(), name
        assert "\n" not in meaning, name


def test_mode_switch_is_gone() -> None:
    """PYTEST_E2B_ENV_MODE is neither declared nor read: behaviour never hangs on a hidden switch."""
    assert "PYTEST_E2B_ENV_MODE" not in ENVIRONMENT
    assert "PYTEST_E2B_ENV_MODE" not in SETTINGS.read_text(encoding="utf-8")


def test_docs_list_every_variable() -> None:
    """docs/plugin.md documents every declared variable."""
    text = DOCS.read_text(encoding="utf-8")
    missing = [name for name in ENVIRONMENT if f"`{name}`" not in text]
    assert missing == []


def test_settings_hide_the_key_and_round_trip() -> None:
    """The key never shows in repr/str; from_env(to_env()) gives the same settings back."""
    s = TargetSettings(run_id="run-7", api_key="sk-secret-value", api_url="http://127.0.0.1:1", template="t")
    assert "sk-secret-value" not in repr(s)
    assert "sk-secret-value" not in str(s)
    env = {k: v for k, v in s.to_env().items() if v is not None}
    assert TargetSettings.from_env(env) == s
    assert s.sdk_opts() == {
        "request_timeout": 15.0,
        "api_key": "sk-secret-value",
        "api_url": "http://127.0.0.1:1",
    }


def test_live_settings_ignore_a_stale_emulator_url() -> None:
    """Live settings read https://api.$E2B_DOMAIN (or the LIVE_* overrides), never E2B_API_URL."""
    env = {"E2B_API_URL": "http://127.0.0.1:9", "E2B_DOMAIN": "sbx.example.org", "E2B_API_KEY": "k"}
    live = TargetSettings.from_env(env, live=True, run_id="r1")
    assert (live.mode, live.api_url, live.sandbox_url) == ("live", "https://api.sbx.example.org", None)
    env["PYTEST_E2B_ENV_LIVE_API_URL"] = "http://10.0.0.7:3000"
    assert TargetSettings.from_env(env, live=True).api_url == "http://10.0.0.7:3000"


def test_bad_mode_names_the_value() -> None:
    """An unknown mode is rejected with the value and the choices."""
    with pytest.raises(ValueError, match="mode='staging' is not one of offline, live"):
        TargetSettings(mode="staging")
