"""Where the bundled data lives: the case catalog (``cases/``) and its fixtures (``fixtures/``).

In a source checkout or an editable install they sit beside the package; a wheel installs them
under ``<prefix>/share/pytest-e2b-env`` (``[tool.setuptools.data-files]`` in pyproject.toml).
One resolver, so every layer finds the same files in both layouts.
"""

from __future__ import annotations

import sysconfig
from functools import cache
from pathlib import Path

from pytest_e2b_env.errors import ConfigError


@cache
def data_root() -> Path:
    """The directory holding ``cases/`` and ``fixtures/``."""
    checkout = Path(__file__).resolve().parents[1]
    installed = Path(sysconfig.get_path("data")) / "share" / "pytest-e2b-env"
    for root in (checkout, installed):
        if (root / "cases").is_dir() and (root / "fixtures").is_dir():
            return root
    raise ConfigError(
        f"bundled data not found in {checkout} or {installed}: reinstall pytest-e2b-env "
        "(pip install --force-reinstall pytest-e2b-env) or run from a source checkout"
    )


def cases_dir() -> Path:
    """The bundled case catalog, one TOML file per family."""
    return data_root() / "cases"


def fixtures_dir() -> Path:
    """Task data and candidate programs the cases, the reward pool and the episode use."""
    return data_root() / "fixtures"
