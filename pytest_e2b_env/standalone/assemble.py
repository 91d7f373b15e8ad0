"""Assembly: a module of this package as a script that runs on the standard library alone.

``script("reward_runner")`` is the text a sandbox receives: the module's own text, with a block
after its docstring and ``__future__`` imports that embeds the standalone modules it imports
(relative imports, found anywhere in the module, and theirs in turn) as source strings. At run
time the block executes each embedded module, dependencies first, into a module object of a
package named :data:`PACKAGE` (registered in ``sys.modules``) and sets the script's
``__package__`` to it (PEP 366), so the script's ``from . import linux as L`` finds them. Each
embedded module is compiled under its path in this package, so a traceback from a sandbox names
the file and line to open here. A module that imports no standalone module is returned as it is.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from pathlib import Path

#: The package the embedded modules form inside an assembled script (not this one's name, so a
#: sandbox that has pytest_e2b_env installed keeps its own).
PACKAGE = "pytest_e2b_env_standalone"
HERE = Path(__file__).parent

_BEGIN = """\
# -- Embedded by pytest_e2b_env.standalone.assemble: the standalone modules this script imports
#    ({names}), so that it runs on the standard library alone. Its own text follows the block.
def _embed_standalone(modules):
    import sys
    import types

    package = types.ModuleType({package!r})
    package.__path__ = []
    sys.modules[package.__name__] = package
    for name, source in modules:
        module = types.ModuleType(package.__name__ + "." + name)
        module.__package__ = package.__name__
        sys.modules[module.__name__] = module
        path = "pytest_e2b_env/standalone/" + name + ".py (embedded)"
        exec(compile(source, path, "exec", dont_inherit=True), module.__dict__)
        setattr(package, name, module)
    return package.__name__


__package__ = _embed_standalone([
"""
_END = """\
])
del _embed_standalone
# -- end of the embedded modules
"""


class AssemblyError(ValueError):
    """A standalone module cannot be assembled (an unknown module, an import cycle, an absolute import)."""


def source(name: str) -> str:
    """The text of the standalone module ``name`` (``"linux"`` for ``standalone/linux.py``)."""
    path = HERE / f"{name}.py"
    if not name.isidentifier() or not path.is_file():
        raise AssemblyError(f"{name!r} is not a module of pytest_e2b_env.standalone ({path} does not exist)")
    return path.read_text(encoding="utf-8")


@functools.cache
def _tree(name: str) -> ast.Module:
    """The parsed source of standalone module ``name``, once per process (the runner is 80 KB)."""
    return ast.parse(source(name), f"{name}.py")


def constant(name: str, attribute: str) -> object:
    """The literal value a top-level ``attribute = ...`` of the standalone module ``name`` has,
    read from its source: the host needs a few of a sandbox script's constants (the reward runner's
    boot program and case environment) without importing, so running, the script itself."""
    for node in _tree(name).body:
        if isinstance(node, ast.Assign) and any(
            isinstance(target, ast.Name) and target.id == attribute for target in node.targets
        ):
            try:
                return ast.literal_eval(node.value)
            except ValueError:
                raise AssemblyError(f"{name}.py:{node.lineno}: {attribute} is not a literal") from None
    raise AssemblyError(f"{name}.py has no top-level {attribute}")


def imports_of(name: str, text: str) -> list[str]:
    """The standalone modules ``text`` imports, in source order (each relative import names one or more)."""
    found: list[str] = []
    for node in _statements(ast.parse(text, f"{name}.py").body):
        if isinstance(node, ast.ImportFrom) and node.level:
            if node.level != 1:
                raise AssemblyError(f"{name}.py:{node.lineno}: only 'from . import x' reaches this package")
            found += [node.module] if node.module else [alias.name for alias in node.names]
        elif isinstance(node, ast.Import | ast.ImportFrom) and _names_this_package(node):
            raise AssemblyError(
                f"{name}.py:{node.lineno}: import standalone modules relatively (from . import x)"
            )
    return list(dict.fromkeys(found))


def _statements(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """Every statement in ``body``, nested ones included (an import is a statement: expressions,
    nine in ten of a module's nodes, are never walked; ``ast.walk`` took half of assembling)."""
    for node in body:
        yield node
        for field in ("body", "orelse", "finalbody"):
            nested = getattr(node, field, None)
            if isinstance(nested, list):
                yield from _statements(nested)
        for part in (*getattr(node, "handlers", ()), *getattr(node, "cases", ())):
            yield from _statements(part.body)


def _names_this_package(node: ast.Import | ast.ImportFrom) -> bool:
    names = [node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
    return any(n == "pytest_e2b_env" or n.startswith("pytest_e2b_env.") for n in names)


def dependencies(name: str) -> list[str]:
    """Every standalone module ``name`` needs, each after the ones it imports itself (``name`` excluded)."""
    order: list[str] = []
    visiting: list[str] = []

    def visit(module: str) -> None:
        if module in order:
            return
        if module in visiting:
            raise AssemblyError("standalone modules import each other in a cycle: " + " -> ".join(visiting))
        visiting.append(module)
        for dep in imports_of(module, source(module)):
            visit(dep)
        visiting.pop()
        order.append(module)

    visit(name)
    return order[:-1]


def _literal(text: str) -> str:
    """``text`` as a Python string literal, readable (raw, triple-quoted) whenever that is exact."""
    raw = "r'''" + text + "'''"
    if "'''" not in text and not text.endswith(("\\", "'")):
        try:
            if ast.literal_eval(raw) == text:
                return raw
        except (SyntaxError, ValueError):
            pass
    return repr(text)


def _insertion_line(text: str) -> int:
    """Lines of ``text`` that stay ahead of the embedded block: its docstring and ``__future__`` imports."""
    after = 0
    for index, node in enumerate(ast.parse(text).body):
        docstring = index == 0 and isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
        future = isinstance(node, ast.ImportFrom) and node.module == "__future__"
        if not (docstring or future):
            break
        after = node.end_lineno or node.lineno
    return after


@functools.cache
def script(name: str) -> str:
    """The text of standalone module ``name`` with every standalone module it imports embedded."""
    text = source(name)
    deps = dependencies(name)
    if not deps:
        return text
    entries = "".join(f"    ({dep!r}, {_literal(source(dep))}),\n" for dep in deps)
    block = _BEGIN.format(names=", ".join(deps), package=PACKAGE) + entries + _END
    lines = text.splitlines(keepends=True)
    cut = _insertion_line(text)
    return "".join(lines[:cut]) + "\n" + block + "".join(lines[cut:])
