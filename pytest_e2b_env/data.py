"""Where the bundled data lives: the case catalog (``cases/``), its fixtures (``fixtures/``), the docs.

An installed package carries them as package data, ``pytest_e2b_env/_data/{cases,fixtures,docs}``
(``setup.py`` maps the checkout's top-level directories there), found with
``importlib.resources`` wherever the package was installed: a venv, ``pip install --user``,
``--target`` plus ``PYTHONPATH``. A source checkout (``PYTHONPATH`` at it, or an editable
install) has no ``_data``; there they sit beside the package. One resolver, so every layer
finds the same files.
"""

from __future__ import annotations

from functools import cache
from importlib import resources
from pathlib import Path

from pytest_e2b_env.errors import ConfigError


def _has_data(root: Path) -> bool:
    return (root / "cases").is_dir() and (root / "fixtures").is_dir()


@cache
def data_root() -> Path:
    """The directory holding ``cases/`` and ``fixtures/``."""
    package = resources.files("pytest_e2b_env")
    if not isinstance(package, Path):
        # The subjects' sandboxes get fixture files copied from disk: a zip import cannot serve them.
        raise ConfigError(
            f"pytest-e2b-env is imported from {package!s}, not a directory: install it normally "
            "(pip install pytest-e2b-env) instead of from a zip"
        )
    installed = package / "_data"
    checkout = package.parent
    for root in (installed, checkout):
        if _has_data(root):
            return root
    raise ConfigError(
        f"bundled data not found in {installed} or {checkout}: this pytest-e2b-env build lacks its "
        "package data; reinstall it from a wheel (pip install --force-reinstall pytest-e2b-env)"
    )


def cases_dir() -> Path:
    """The bundled case catalog, one TOML file per family."""
    return data_root() / "cases"


def fixtures_dir() -> Path:
    """Task data and candidate programs the cases, the reward pool and the episode use."""
    return data_root() / "fixtures"


def docs_dir() -> Path:
    """The documentation pages (``docs/*.md``) that ``pytest-e2b-env docs`` prints."""
    root = data_root() / "docs"
    if not root.is_dir():
        raise ConfigError(
            f"documentation not found in {root}: this pytest-e2b-env build lacks its docs; reinstall it "
            "from a wheel (pip install --force-reinstall pytest-e2b-env)"
        )
    return root
