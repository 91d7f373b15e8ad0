"""pytest_e2b_env.standalone: stdlib-only modules, assembled into scripts that run with nothing else.

The code that runs inside sandboxes (or under ``python -I -S``) lives in one package; its modules
import only the standard library and each other, an assembled script runs where this package is
not importable, and the syscall code they share is written once (``standalone/linux.py``).
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from import_graph import PACKAGE, graph

from pytest_e2b_env.standalone import assemble

STANDALONE = "standalone"
MODULES = sorted(p.stem for p in (PACKAGE / STANDALONE).glob("*.py") if p.stem != "__init__")
#: The scripts that run outside the package: uploaded, sent on stdin, or started under -I -S.
SCRIPTS = ("reward_runner", "reward_probe", "sandbox_init", "interpreter_kernel")
#: The interpreter the sandboxes run (the emulator's sandboxes see the host's /usr/bin/python3).
PYTHON = "/usr/bin/python3" if os.access("/usr/bin/python3", os.X_OK) else sys.executable
#: Runs a script's module body without its entry point and names what it imported of the package.
IMPORT_ONLY = """\
import json, sys
path = sys.argv[1]
code = compile(open(path, encoding="utf-8").read(), path, "exec")
exec(code, {"__name__": "standalone_check", "__file__": path})
print(json.dumps(sorted(name for name in sys.modules if "standalone" in name or "pytest_e2b_env" in name)))
"""


def _run(args: list[str], stdin: str = "", cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PYTHON, "-I", "-S", "-B", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,
        check=False,
    )


# ------------------------------------------------------------------ (a) stdlib and itself only
def outside_imports(package: Path = PACKAGE) -> list[str]:
    """Every import of a standalone module that is neither the standard library nor the standalone package."""
    root = f"{package.name}.{STANDALONE}"
    found = []
    for module, imports in graph(package).items():
        if not (module == root or module.startswith(root + ".")):
            continue
        for imp in imports:
            top = imp.target.split(".")[0]
            inside = imp.target == root or imp.target.startswith(root + ".")
            if not inside and (top == package.name or top not in sys.stdlib_module_names):
                found.append(f"{module}:{imp.line} imports {imp.target}")
    return found


def test_standalone_modules_import_only_the_standard_library_and_each_other() -> None:
    """No module of pytest_e2b_env.standalone imports the rest of the package or a third-party one."""
    assert MODULES  # the package is where the layer table says
    assert outside_imports() == []


def test_the_import_check_names_what_reaches_outside(tmp_path: Path) -> None:
    """A probe package whose standalone module imports the package and a third-party module fails."""
    package = tmp_path / "probe"
    (package / STANDALONE).mkdir(parents=True)
    for rel in ("__init__.py", "low.py", f"{STANDALONE}/__init__.py", f"{STANDALONE}/linux.py"):
        (package / rel).touch()
    (package / STANDALONE / "runner.py").write_text(
        "import json\nfrom . import linux\nimport yaml\nfrom .. import low\nfrom probe.low import x\n"
    )
    assert outside_imports(package) == [
        "probe.standalone.runner:3 imports yaml",
        "probe.standalone.runner:4 imports probe.low",
        "probe.standalone.runner:5 imports probe.low",
    ]


# ------------------------------------------------------------------------------ (b) assembly
@pytest.mark.parametrize("name", MODULES)
def test_every_standalone_module_assembles_into_a_script_that_compiles(name: str) -> None:
    """Each module's relative imports resolve to modules of the package, and its script compiles."""
    compile(assemble.script(name), f"{name}.py", "exec")


@pytest.mark.parametrize("name", SCRIPTS)
def test_an_assembled_script_runs_on_the_standard_library_alone(name: str, tmp_path: Path) -> None:
    """Under python3 -I -S -B the script's whole body runs: its standalone imports come embedded."""
    path = tmp_path / f"{name}.py"
    path.write_text(assemble.script(name), encoding="utf-8")
    done = _run(["-c", IMPORT_ONLY, str(path)], cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    embedded = [f"{assemble.PACKAGE}.{dep}" for dep in assemble.dependencies(name)]
    assert json.loads(done.stdout) == sorted([assemble.PACKAGE, *embedded] if embedded else [])


@pytest.mark.parametrize(
    ("name", "argv", "stdin", "expected"),
    [
        pytest.param("reward_runner", [], "not a request", "json.decoder.JSONDecodeError", id="runner"),
        pytest.param("reward_probe", [], "not a spec", "json.decoder.JSONDecodeError", id="probe"),
        pytest.param("sandbox_init", ["ctl", "lifeline"], "", "ValueError: invalid literal", id="init"),
    ],
)
def test_an_assembled_script_fails_on_its_input_not_on_an_import(
    name: str, argv: list[str], stdin: str, expected: str, tmp_path: Path
) -> None:
    """Run as the sandbox runs it, with input it refuses: the error is about that input."""
    path = tmp_path / f"{name}.py"
    path.write_text(assemble.script(name), encoding="utf-8")
    done = _run([str(path), *argv], stdin=stdin, cwd=tmp_path)
    assert done.returncode == 1
    assert expected in done.stderr.splitlines()[-1], done.stderr[-3000:]
    assert "ImportError" not in done.stderr  # ModuleNotFoundError included


def test_the_assembled_kernel_runs_a_cell(tmp_path: Path) -> None:
    """The code-interpreter kernel, assembled, runs a cell under python3 -I -S -B and prints its output."""
    path = tmp_path / "kernel.py"
    path.write_text(assemble.script("interpreter_kernel"), encoding="utf-8")
    request = {"op": "execute", "id": "c1", "code": "print(6 * 7)", "envs": {}}
    done = _run([str(path)], stdin=json.dumps(request) + "\n", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    lines, rest = [], done.stdout  # each message: 8 hex digits of length, then the JSON
    while rest:
        size = int(rest[:8], 16)
        lines.append(json.loads(rest[8 : 8 + size]))
        rest = rest[8 + size :]
    assert {"id": "c1", "type": "stream", "name": "stdout", "text": "42\n"} in lines
    assert lines[-1] == {"id": "c1", "type": "done"}


@pytest.mark.parametrize("name", SCRIPTS)
def test_assembly_embeds_each_module_exactly_and_keeps_the_script_as_written(name: str) -> None:
    """The embedded sources equal their files, and the script minus the embedded block is its file."""
    text = assemble.script(name)
    deps = assemble.dependencies(name)
    if not deps:
        assert text == assemble.source(name)
        return
    begin = text.index("\n# -- Embedded by pytest_e2b_env.standalone.assemble")
    end_marker = "# -- end of the embedded modules\n"
    end = text.index(end_marker) + len(end_marker)
    assert text[:begin] + text[end:] == assemble.source(name)
    (call,) = [
        node
        for node in ast.walk(ast.parse(text))
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "_embed_standalone"
    ]
    embedded = ast.literal_eval(call.args[0])
    assert embedded == [(dep, assemble.source(dep)) for dep in deps]


@given(st.text())
def test_a_module_text_survives_its_string_literal(text: str) -> None:
    """Any text, quotes and backslashes included, reads back exactly from the literal that embeds it."""
    assert ast.literal_eval(assemble._literal(text)) == text


@pytest.mark.parametrize(
    ("files", "message"),
    [
        pytest.param({"a.py": "from . import missing\n"}, "'missing' is not a module", id="unknown-module"),
        pytest.param(
            {"a.py": "from pytest_e2b_env.standalone import b\n", "b.py": ""},
            "a.py:1: import standalone modules relatively (from . import x)",
            id="absolute-import",
        ),
        pytest.param({"a.py": "from .. import b\n"}, "a.py:1: only 'from . import x'", id="parent-package"),
        pytest.param(
            {"a.py": "from . import b\n", "b.py": "from .a import f\n"},
            "a cycle: a -> b",
            id="cycle",
        ),
    ],
)
def test_assembly_refuses_what_it_cannot_embed(
    files: dict[str, str], message: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An unknown module, an absolute or parent import, or a cycle is an error naming the import."""
    for rel, text in files.items():
        (tmp_path / rel).write_text(text)
    monkeypatch.setattr(assemble, "HERE", tmp_path)
    with pytest.raises(assemble.AssemblyError, match=re.escape(message)):
        assemble.dependencies("a")


# -------------------------------------------------------------------- (c) syscall code once
def redefinitions(package: Path = PACKAGE) -> list[str]:
    """Module-level definitions elsewhere in the package of a public name ``standalone/linux.py`` defines,
    and every ``ctypes.CDLL`` outside it: the syscall code and the kernel's numbers live there only."""
    linux = package / STANDALONE / "linux.py"
    owned = {name for name in _defined(_parse(linux)) if not name.startswith("_")}
    found = []
    for path in sorted(package.rglob("*.py")):
        if path == linux:
            continue
        rel = path.relative_to(package.parent)
        tree = _parse(path)
        copies = sorted(_defined(tree) & owned)
        found += [f"{rel} defines {name} (standalone/linux.py has it)" for name in copies]
        found += [
            f"{rel}:{node.lineno} loads libc (take standalone/linux.py's)"
            for node in ast.walk(tree)
            if isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute | ast.Name)
            and (getattr(node.func, "attr", None) or getattr(node.func, "id", None)) == "CDLL"
        ]
    return found


def _parse(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), str(path))


def _defined(tree: ast.Module) -> set[str]:
    """Names a module binds at its top level by assignment, ``def`` or ``class`` (imports excluded)."""
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {t.id for target in targets for t in ast.walk(target) if isinstance(t, ast.Name)}
    return names


def test_the_syscall_code_is_written_once() -> None:
    """No module but standalone/linux.py defines its wrappers, flags or numbers, or loads libc."""
    assert redefinitions() == []


def test_the_once_check_names_a_copy(tmp_path: Path) -> None:
    """A probe package whose runner keeps its own mount wrapper, flag and libc is named line by line."""
    package = tmp_path / "probe"
    (package / STANDALONE).mkdir(parents=True)
    (package / STANDALONE / "linux.py").write_text(
        "import ctypes\nCLONE_NEWNS = 0x20000\nlibc = ctypes.CDLL(None)\n_private = 1\n\ndef mount(): ...\n"
    )
    (package / STANDALONE / "runner.py").write_text(
        "import ctypes\nCLONE_NEWNS = 0x20000\n_libc = ctypes.CDLL(None, use_errno=True)\n"
        "_private = 2\n\ndef mount(): ...\n"
    )
    assert redefinitions(package) == [
        "probe/standalone/runner.py defines CLONE_NEWNS (standalone/linux.py has it)",
        "probe/standalone/runner.py defines mount (standalone/linux.py has it)",
        "probe/standalone/runner.py:3 loads libc (take standalone/linux.py's)",
    ]


def test_a_constant_read_from_the_source_is_the_modules_own() -> None:
    """The host reads the runner's boot program and case environment from its text, unimported."""
    from pytest_e2b_env.standalone import reward_runner

    assert assemble.constant("reward_runner", "ZYGOTE_BOOT") == reward_runner.ZYGOTE_BOOT
    assert assemble.constant("reward_runner", "CASE_ENV") == reward_runner.CASE_ENV
    with pytest.raises(assemble.AssemblyError, match="_MODULE_CODE is not a literal"):
        assemble.constant("reward_runner", "_MODULE_CODE")
    with pytest.raises(assemble.AssemblyError, match="no top-level NOWHERE"):
        assemble.constant("reward_runner", "NOWHERE")
