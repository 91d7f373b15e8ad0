"""The optional extras and the one check that names a missing one.

The base install validates reward code. Episodes need OpenEnv (``[episode]``), training needs
TRL and torch (``[train]``, which includes ``[episode]``). A feature asks :func:`require` before
importing them, so a base install says which extra to add instead of a bare ``ModuleNotFoundError``.
Presence is checked with ``importlib.util.find_spec``: nothing heavy is imported here.
"""

from __future__ import annotations

import importlib.util

from pytest_e2b_env.errors import MissingExtraError

#: extra -> the top-level modules it provides (pyproject.toml's [project.optional-dependencies])
EXTRAS: dict[str, tuple[str, ...]] = {
    "episode": ("openenv",),
    "train": ("openenv", "torch", "trl", "transformers", "accelerate", "datasets"),
}

# How to install each extra; torch first and pinned, or pip resolves a multi-GB CUDA build.
_INSTALL = {
    "episode": "pip install 'pytest-e2b-env[episode]'",
    "train": "pip install torch==2.13.0 && pip install 'pytest-e2b-env[train]'",
}


def install_hint(module: str) -> str | None:
    """How to get ``module`` when an extra provides it (``openenv.core`` -> the [episode] extra)."""
    top = module.split(".")[0]
    for extra, modules in EXTRAS.items():
        if top in modules:
            return f"it comes with the [{extra}] extra: {_INSTALL[extra]}"
    return None


def missing(extra: str) -> list[str]:
    """The modules of ``extra`` that cannot be found, in declaration order."""
    absent = []
    for module in EXTRAS[extra]:
        try:
            found = importlib.util.find_spec(module)
        except (ImportError, ValueError):
            found = None
        if found is None:
            absent.append(module)
    return absent


def require(extra: str, feature: str) -> None:
    """Raise :class:`MissingExtraError` naming ``extra`` when any of its modules is absent."""
    absent = missing(extra)
    if absent:
        raise MissingExtraError(
            f"{feature} needs the [{extra}] extra ({', '.join(absent)} not installed): {_INSTALL[extra]}"
        )
