"""The package's imports only point down the layers of docs/architecture.md (checked from the source)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from import_graph import PACKAGE, Import, graph, modules, owner

TOP = 99

#: Module prefix -> layer; the longest matching prefix decides. A module may import its own prefix
#: and any lower layer; an import of a higher layer is a violation, inside one package too
#: (``targets.tags`` may not import ``targets.handle``), and so is a same-layer import across
#: prefixes (reward <-> episode, emulator <-> proxy). Keep this table and docs/architecture.md in step.
LAYERS: dict[str, int] = {
    "pytest_e2b_env.errors": 0,
    "pytest_e2b_env.standalone": 0,
    "pytest_e2b_env.settings": 1,
    "pytest_e2b_env.wire": 1,
    "pytest_e2b_env.data": 1,
    "pytest_e2b_env.extras": 1,
    "pytest_e2b_env.environ": 1,
    "pytest_e2b_env.toolsurface": 1,
    "pytest_e2b_env.masking": 1,
    "pytest_e2b_env.targets.backend": 2,
    "pytest_e2b_env.targets.tags": 2,
    "pytest_e2b_env.targets.reap": 3,
    "pytest_e2b_env.emulator": 3,
    "pytest_e2b_env.proxy": 3,
    "pytest_e2b_env.targets": 4,
    "pytest_e2b_env.evidence": 4,
    "pytest_e2b_env.reward": 5,
    "pytest_e2b_env.episode": 5,
    "pytest_e2b_env.catalog": 6,
    "pytest_e2b_env.adapter": 7,
    "pytest_e2b_env.training": 7,
    "pytest_e2b_env.plugin": 8,
    # The top: entry points and the facade may import anything.
    "pytest_e2b_env.cli": TOP,
    "pytest_e2b_env.__main__": TOP,
    "pytest_e2b_env": TOP,
}
#: Only these (under the package) may import pytest: everything else runs where pytest is not the host.
PYTEST_ALLOWED = ("plugin", "adapter", "cli")
#: Code that runs inside sandboxes or under ``python -S`` (under the package): the standard library
#: and itself only.
STANDALONE = "standalone"


def _layer(name: str, layers: dict[str, int]) -> tuple[str, int] | None:
    for prefix in sorted(layers, key=len, reverse=True):
        if name == prefix or name.startswith(prefix + "."):
            return prefix, layers[prefix]
    return None


def _within(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def violations(package: Path = PACKAGE, layers: dict[str, int] = LAYERS) -> list[str]:
    """Every import that breaks a rule, as ``module:line what``."""
    edges = graph(package)
    known = modules(package)
    out: list[str] = []
    for module, imports in edges.items():
        mine = _layer(module, layers)
        if mine is None:
            out.append(f"{module} has no layer in LAYERS")
            continue
        for imp in imports:
            out += _check(module, mine, imp, known, layers)
    return sorted(out)


def _check(
    module: str, mine: tuple[str, int], imp: Import, known: dict[str, Path], layers: dict[str, int]
) -> list[str]:
    where = f"{module}:{imp.line}"
    top = imp.target.split(".")[0]
    package = module.split(".")[0]
    if _within(module, (f"{package}.{STANDALONE}",)):
        if top == package and not _within(imp.target, (f"{package}.{STANDALONE}",)):
            return [f"{where} imports {imp.target} (standalone code imports only itself and the stdlib)"]
        if top != package and top not in sys.stdlib_module_names:
            return [f"{where} imports {imp.target} (standalone code imports only the standard library)"]
        return []
    if top == "pytest" and not _within(module, tuple(f"{package}.{name}" for name in PYTEST_ALLOWED)):
        return [f"{where} imports pytest (only plugin.py, adapter/ and cli/ may)"]
    landed = owner(imp.target, known)
    if landed is None or mine[1] == TOP:
        return []
    theirs = _layer(landed, layers)
    if theirs is None or theirs[0] == mine[0]:
        return []
    if theirs[1] > mine[1]:
        return [f"{where} imports {landed} (layer {theirs[1]} over {mine[1]})"]
    if theirs[1] == mine[1]:
        return [f"{where} imports {landed} (sideways: {theirs[0]} is layer {mine[1]} too)"]
    return []


def test_no_import_breaks_a_layer_rule() -> None:
    """Every import inside the package points to a lower layer or the module's own prefix."""
    assert violations() == []


# ---------------------------------------------------------------------- the checker can fail
PROBE_LAYERS = {
    "probe.standalone": 0,
    "probe.low": 1,
    "probe.pkg.base": 2,
    "probe.pkg": 4,
    "probe.left": 3,
    "probe.right": 3,
    "probe.engine": 6,
    "probe.plugin": 8,
    "probe": TOP,
}


def _probe(tmp_path: Path, files: dict[str, str]) -> list[str]:
    package = tmp_path / "probe"
    for rel in ["__init__.py", "low.py", "left.py", "right.py", "engine.py", "plugin.py"]:
        (package / rel).parent.mkdir(parents=True, exist_ok=True)
        (package / rel).touch()
    for rel in [
        "pkg/__init__.py",
        "pkg/base.py",
        "pkg/handle.py",
        "standalone/__init__.py",
        "standalone/a.py",
    ]:
        (package / rel).parent.mkdir(parents=True, exist_ok=True)
        (package / rel).touch()
    for rel, text in files.items():
        (package / rel).parent.mkdir(parents=True, exist_ok=True)
        (package / rel).write_text(text)
    return violations(package, PROBE_LAYERS)


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        pytest.param(
            {"low.py": "from probe import engine\n"},
            ["probe.low:1 imports probe.engine (layer 6 over 1)"],
            id="upward",
        ),
        pytest.param(
            {"low.py": "def f():\n    from probe.engine import run\n"},
            ["probe.low:2 imports probe.engine (layer 6 over 1)"],
            id="upward-lazy",
        ),
        pytest.param(
            {"pkg/base.py": "from .handle import open_it\n"},
            ["probe.pkg.base:1 imports probe.pkg.handle (layer 4 over 2)"],
            id="upward-inside-a-package",
        ),
        pytest.param(
            {"pkg/base.py": "from probe import pkg\n"},
            ["probe.pkg.base:1 imports probe.pkg (layer 4 over 2)"],
            id="own-package-facade-above",
        ),
        pytest.param(
            {"left.py": "import probe.right\n"},
            ["probe.left:1 imports probe.right (sideways: probe.right is layer 3 too)"],
            id="sideways",
        ),
        pytest.param(
            {"engine.py": "def f():\n    import pytest\n"},
            ["probe.engine:2 imports pytest (only plugin.py, adapter/ and cli/ may)"],
            id="pytest-outside-the-plugin",
        ),
        pytest.param(
            {"standalone/a.py": "import json\nimport yaml\n"},
            ["probe.standalone.a:2 imports yaml (standalone code imports only the standard library)"],
            id="standalone-third-party",
        ),
        pytest.param(
            {"standalone/a.py": "from probe import low\n"},
            ["probe.standalone.a:1 imports probe.low (standalone code imports only itself and the stdlib)"],
            id="standalone-package",
        ),
        pytest.param(
            {"stray.py": ""},
            [],
            id="no-layer-is-fine-only-under-the-top",
        ),
        pytest.param(
            {
                "engine.py": "from probe import low\nfrom probe.pkg import base\n",
                "plugin.py": "import pytest\n",
            },
            [],
            id="allowed",
        ),
    ],
)
def test_the_checker_sees_each_kind_of_violation(
    tmp_path: Path, files: dict[str, str], expected: list[str]
) -> None:
    """Each rule has a probe package that breaks it, and the checker names that import."""
    assert _probe(tmp_path, files) == expected


def test_a_module_without_a_layer_is_named(tmp_path: Path) -> None:
    """A module outside every prefix of the table is a violation, not silently allowed."""
    layers = {k: v for k, v in PROBE_LAYERS.items() if k != "probe"}
    package = tmp_path / "probe"
    package.mkdir()
    (package / "__init__.py").touch()
    (package / "low.py").touch()
    (package / "stray.py").touch()
    assert violations(package, layers) == [
        "probe has no layer in LAYERS",
        "probe.stray has no layer in LAYERS",
    ]


def test_every_command_lives_in_cli() -> None:
    """The console script's commands are modules of pytest_e2b_env.cli, each with main(argv)."""
    import importlib

    from pytest_e2b_env.cli import COMMANDS

    for name, (module, _help) in COMMANDS.items():
        assert module.startswith("pytest_e2b_env.cli."), name
        assert callable(importlib.import_module(module).main), name
