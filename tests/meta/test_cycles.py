"""No two modules of the package import each other, directly or around a loop (lazy imports count)."""

from __future__ import annotations

from pathlib import Path

import pytest
from import_graph import cycles, graph


def test_no_import_cycle() -> None:
    """The module graph, with imports inside functions and under TYPE_CHECKING, has no cycle."""
    assert cycles(graph()) == []


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        pytest.param(
            {"a.py": "import probe.b\n", "b.py": "from probe import a\n"},
            [["probe.a", "probe.b"]],
            id="direct",
        ),
        pytest.param(
            {
                "a.py": "def f():\n    from probe.b import g\n",
                "b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from probe.c import C\n",
                "c.py": "from . import a\n",
            },
            [["probe.a", "probe.b", "probe.c"]],
            id="lazy-and-type-checking-around-a-loop",
        ),
        pytest.param(
            {"pkg/__init__.py": "from probe.pkg.a import A\n", "pkg/a.py": "from probe.pkg import helper\n"},
            [["probe.pkg", "probe.pkg.a"]],
            id="through-a-package-facade",
        ),
        pytest.param(
            {"pkg/__init__.py": "from probe.pkg.a import A\n", "pkg/a.py": "from probe.pkg import b\n"},
            [],
            id="a-sibling-module-is-no-cycle",
        ),
    ],
)
def test_the_check_finds_a_cycle(tmp_path: Path, files: dict[str, str], expected: list[list[str]]) -> None:
    """Probe packages with a loop (direct, lazy, through a facade) are caught; a sibling import is not."""
    package = tmp_path / "probe"
    package.mkdir()
    (package / "__init__.py").touch()
    for rel, text in files.items():
        (package / rel).parent.mkdir(parents=True, exist_ok=True)
        (package / rel).write_text(text)
    if "pkg/a.py" in files and "pkg/b.py" not in files:
        (package / "pkg" / "b.py").touch()
    assert cycles(graph(package)) == expected
