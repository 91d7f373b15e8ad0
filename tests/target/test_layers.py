"""Layers never import upward: no library layer imports cli/ or the pytest glue; evidence not the catalog."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest_e2b_env

PACKAGE = Path(pytest_e2b_env.__file__).parent
GLUE = ("cli", "adapter", "plugin", "fixtures")
#: What each library layer must never import (besides the glue above), even lazily.
FORBIDDEN = {
    "target": ("catalog", "reward", "episode", "training", "evidence"),
    "emulator": ("catalog", "reward", "episode", "training", "evidence"),
    "proxy": ("catalog", "reward", "episode", "training", "evidence"),
    "reward": ("catalog", "training", "evidence"),
    "episode": ("catalog", "training", "evidence"),
    "evidence": ("catalog", "training", "reward", "episode"),
    "catalog": ("training",),
    "training": ("catalog",),
}


def _imports(path: Path) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.append((node.lineno, node.module))
        elif isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
    return found


def _violations() -> list[str]:
    bad = []
    for layer, banned in FORBIDDEN.items():
        for path in sorted((PACKAGE / layer).rglob("*.py")):
            for lineno, module in _imports(path):
                parts = module.split(".")
                if parts[0] != "pytest_e2b_env" or len(parts) < 2:
                    continue
                if parts[1] in GLUE or parts[1] in banned:
                    bad.append(f"{path.relative_to(PACKAGE)}:{lineno} imports {module}")
    return bad


def test_no_library_layer_imports_upward() -> None:
    """emulator, proxy, reward, episode, catalog, evidence, target and training import no layer above them."""
    assert _violations() == []


def test_every_command_lives_in_cli() -> None:
    """The console script's commands are modules of pytest_e2b_env.cli, each with main(argv)."""
    import importlib

    from pytest_e2b_env.cli import COMMANDS

    for name, (module, _help) in COMMANDS.items():
        assert module.startswith("pytest_e2b_env.cli."), name
        assert callable(importlib.import_module(module).main), name
