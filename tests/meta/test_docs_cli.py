"""`pytest-e2b-env docs`: every page of docs/ from the package's own data, and messages that name it."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_e2b_env.cli import main
from pytest_e2b_env.cli.docs import title
from pytest_e2b_env.data import docs_dir

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted(p.stem for p in (ROOT / "docs").glob("*.md"))


def test_docs_lists_every_page_with_its_title(capsys: pytest.CaptureFixture[str]) -> None:
    """`docs` alone lists each page of docs/ on one line with its heading, then where the files are."""
    assert main(["docs"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0] == "pytest-e2b-env docs TOPIC prints one of these pages:"
    listed = [line.split()[0] for line in lines[2 : 2 + len(PAGES)]]
    assert listed == PAGES
    assert re.search(r"^  plugin +The pytest plugin$", out, re.M)
    assert lines[-1] == f"The pages are Markdown files in {docs_dir()}"
    assert docs_dir() == ROOT / "docs"  # a checkout reads its own docs/


@pytest.mark.parametrize("topic", ["plugin", "plugin.md", "docs/plugin.md", "Plugin"])
def test_docs_topic_prints_the_page(topic: str, capsys: pytest.CaptureFixture[str]) -> None:
    """`docs plugin` prints docs/plugin.md exactly; its file name and its path in the source tree work too."""
    assert main(["docs", topic]) == 0
    assert capsys.readouterr().out == (ROOT / "docs" / "plugin.md").read_text(encoding="utf-8")


def test_unknown_topic_is_a_usage_error_naming_the_known_ones(capsys: pytest.CaptureFixture[str]) -> None:
    """An unknown topic exits 2 with every known topic and the closest one."""
    assert main(["docs", "plugn"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (
        f"pytest-e2b-env docs: unknown topic 'plugn'; known topics: {', '.join(PAGES)} "
        "(did you mean 'plugin'?)\n"
    )


def test_every_page_has_a_heading() -> None:
    """Each page starts with a heading, the line `docs` lists."""
    assert all(title(ROOT / "docs" / f"{page}.md") for page in PAGES)


def test_a_reader_closing_the_pipe_early_is_no_error() -> None:
    """`pytest-e2b-env docs catalog | head -1`: exit 0 and nothing on stderr."""
    with subprocess.Popen(
        [sys.executable, "-m", "pytest_e2b_env.cli", "docs", "catalog"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        bufsize=0,
    ) as proc:
        assert proc.stdout is not None
        assert proc.stderr is not None
        assert proc.stdout.read(7) == b"# The c"
        proc.stdout.close()
        err = proc.stderr.read()
        assert proc.wait(timeout=60) == 0
    assert err == b""


def _messages(path: Path) -> list[tuple[int, str]]:
    """String constants of a module that are not docstrings (f-string parts included), with lines."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            first = node.body[0] if node.body else None
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                docstrings.add(id(first.value))
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
    ]


def test_messages_point_at_the_docs_command_not_at_source_paths() -> None:
    """No message of the package names a docs/*.md path (a pip user has none); each named topic exists."""
    paths, topics = [], []
    for module in sorted((ROOT / "pytest_e2b_env").rglob("*.py")):
        for line, text in _messages(module):
            where = f"{module.relative_to(ROOT)}:{line}"
            paths += [f"{where}: {m}" for m in re.findall(r"docs/\w+\.md", text)]
            topics += [(where, m) for m in re.findall(r"pytest-e2b-env docs (\w+)", text)]
    assert paths == []
    assert topics, "no message names the docs command"
    assert [(where, name) for where, name in topics if name not in PAGES] == []
