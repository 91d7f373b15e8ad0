"""The package's import graph, read from the source (lazy imports inside functions included).

One parser for the layer, cycle and standard-library checks, so they agree on what an import is:

* ``import a.b`` is an import of module ``a.b``;
* ``from a import b`` is an import of module ``a.b`` when that module exists, else of ``a`` (a name
  from a package's ``__init__``): importing a submodule runs its package's ``__init__`` too, but
  that is Python's doing, not an import the code wrote, so it is no edge of the graph;
* relative imports are resolved against the importing module's package;
* imports under ``if TYPE_CHECKING:`` count: they are still a dependency a reader must follow.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "pytest_e2b_env"


@dataclass(frozen=True)
class Import:
    """One import statement's target, as a module name, with where it was written."""

    module: str  # the importing module
    line: int
    target: str  # the imported module (or outside name, e.g. "pytest" or "json.decoder")


def module_name(path: Path, package: Path) -> str:
    """``pkg/a/b.py`` -> ``pkg.a.b``; ``pkg/a/__init__.py`` -> ``pkg.a``."""
    parts = list(path.relative_to(package.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules(package: Path = PACKAGE) -> dict[str, Path]:
    """Every module of the package, by name."""
    return {module_name(path, package): path for path in sorted(package.rglob("*.py"))}


def imports_of(module: str, path: Path, known: dict[str, Path]) -> list[Import]:
    """What ``module`` imports, in source order."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    base = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: list[Import] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [Import(module, node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = base.split(".")
                parts = parts[: len(parts) - (node.level - 1)]
                source = ".".join([*parts, node.module] if node.module else parts)
            else:
                source = node.module or ""
            submodules = [f"{source}.{alias.name}" for alias in node.names]
            named = [name for name in submodules if name in known]
            found += [Import(module, node.lineno, name) for name in named]
            if len(named) < len(submodules):
                found.append(Import(module, node.lineno, source))
    return sorted(found, key=lambda imp: (imp.line, imp.target))


def graph(package: Path = PACKAGE) -> dict[str, list[Import]]:
    """Module -> its imports (every import, inside the package or not)."""
    known = modules(package)
    return {name: imports_of(name, path, known) for name, path in known.items()}


def owner(target: str, known: dict[str, Path] | dict[str, list[Import]]) -> str | None:
    """The package module an import lands in (``pkg.a.b.func`` -> ``pkg.a.b``), None outside it."""
    name = target
    while name:
        if name in known:
            return name
        name = name.rpartition(".")[0]
    return None


def cycles(edges: dict[str, list[Import]]) -> list[list[str]]:
    """Groups of modules that import each other, directly or around a loop (Tarjan, iterative)."""
    adjacency = {
        name: sorted({o for imp in imps if (o := owner(imp.target, edges)) and o != name})
        for name, imps in edges.items()
    }
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in adjacency:
        if root in index:
            continue
        work = [(root, iter(adjacency[root]))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, successors = work[-1]
            for nxt in successors:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(adjacency[nxt])))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    group = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        group.append(member)
                        if member == node:
                            break
                    if len(group) > 1:
                        found.append(sorted(group))
    return sorted(found)
