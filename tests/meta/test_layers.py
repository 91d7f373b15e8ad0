"""The package's imports only point down the layers of docs/architecture.md (checked from the source)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "pytest_e2b_env"
TOP = 99

#: Module prefix -> layer, most specific prefix first. A module may import its own package and any
#: lower layer; a same-layer import across packages (reward <-> episode, emulator <-> proxy) is a
#: violation too. Keep this table and docs/architecture.md in step.
LAYERS: list[tuple[str, int]] = [
    ("pytest_e2b_env.errors", 0),
    ("pytest_e2b_env.environ", 1),
    ("pytest_e2b_env.toolsurface", 1),
    ("pytest_e2b_env.data", 1),
    ("pytest_e2b_env.extras", 1),
    ("pytest_e2b_env.masking", 1),
    ("pytest_e2b_env.target.settings", 1),
    ("pytest_e2b_env.target.wire", 1),
    ("pytest_e2b_env.target.tags", 2),
    ("pytest_e2b_env.target.backend", 2),
    ("pytest_e2b_env.emulator", 3),
    ("pytest_e2b_env.proxy", 3),
    ("pytest_e2b_env.target", 4),
    ("pytest_e2b_env.evidence", 4),
    ("pytest_e2b_env.target.reap", 5),
    ("pytest_e2b_env.reward", 5),
    ("pytest_e2b_env.episode", 5),
    ("pytest_e2b_env.catalog", 6),
    ("pytest_e2b_env.training", 7),
    ("pytest_e2b_env.adapter", 7),
    ("pytest_e2b_env.plugin", 8),
    # The top: entry points and the facade may import anything.
    ("pytest_e2b_env.cli", TOP),
    ("pytest_e2b_env.__main__", TOP),
    ("pytest_e2b_env", TOP),
]
#: Modules that run where pytest is not the host (the engine, the subjects, the backends).
NO_PYTEST = (
    "pytest_e2b_env.catalog",
    "pytest_e2b_env.reward",
    "pytest_e2b_env.episode",
    "pytest_e2b_env.emulator",
    "pytest_e2b_env.proxy",
    "pytest_e2b_env.target",
    "pytest_e2b_env.evidence",
    "pytest_e2b_env.training",
)


def _module(path: Path, package: Path) -> str:
    rel = path.relative_to(package.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _layer(name: str) -> tuple[str, int] | None:
    for prefix, layer in LAYERS:
        if name == prefix or name.startswith(prefix + "."):
            return prefix, layer
    return None


def _package(name: str) -> str:
    return ".".join(name.split(".")[:2])


def _imports(path: Path, module: str) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: list[tuple[int, str]] = []
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                name = ".".join([*base, node.module] if node.module else base)
            else:
                name = node.module or ""
            found.append((node.lineno, name))
    return found


def _violations(package: Path = PACKAGE) -> list[str]:
    out = []
    for path in sorted(package.rglob("*.py")):
        module = _module(path, package)
        mine = _layer(module)
        assert mine is not None, f"{module} has no layer in LAYERS"
        for line, name in _imports(path, module):
            if name.split(".")[0] == "pytest" and module.startswith(NO_PYTEST):
                out.append(f"{module}:{line} imports pytest (only plugin.py and adapter/ may)")
            if not name.startswith("pytest_e2b_env"):
                continue
            theirs = _layer(name)
            if theirs is None or _package(name) == _package(module) or mine[1] == TOP:
                continue
            if theirs[1] > mine[1] or (theirs[1] == mine[1] and theirs[0] != mine[0]):
                out.append(f"{module}:{line} imports {name} (layer {theirs[1]} over {mine[1]})")
    return out


def test_no_upward_import() -> None:
    """Every import inside the package points to a lower layer or the module's own package."""
    assert _violations() == []


def test_the_check_sees_an_upward_import(tmp_path: Path) -> None:
    """The checker flags an emulator module importing the catalog, and pytest in the engine (it can fail)."""
    package = tmp_path / "pytest_e2b_env"
    (package / "emulator").mkdir(parents=True)
    (package / "catalog").mkdir()
    (package / "__init__.py").write_text("")
    (package / "emulator" / "probe.py").write_text("from pytest_e2b_env.catalog import runner\n")
    (package / "catalog" / "probe.py").write_text("def f():\n    import pytest\n")
    assert _violations(package) == [
        "pytest_e2b_env.catalog.probe:2 imports pytest (only plugin.py and adapter/ may)",
        "pytest_e2b_env.emulator.probe:1 imports pytest_e2b_env.catalog (layer 6 over 3)",
    ]


def test_every_command_lives_in_cli() -> None:
    """The console script's commands are modules of pytest_e2b_env.cli, each with main(argv)."""
    import importlib

    from pytest_e2b_env.cli import COMMANDS

    for name, (module, _help) in COMMANDS.items():
        assert module.startswith("pytest_e2b_env.cli."), name
        assert callable(importlib.import_module(module).main), name
