"""``pytest-e2b-env docs [TOPIC]``: print the documentation shipped with the package.

Every page of the checkout's ``docs/`` travels in the wheel as package data (``setup.py``), found
by the one data resolver, :func:`pytest_e2b_env.data.docs_dir`; a pip user has no checkout, and
messages that point at a page name this command (``pytest-e2b-env docs plugin``).
"""

from __future__ import annotations

import argparse
import difflib
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from pytest_e2b_env.data import docs_dir
from pytest_e2b_env.errors import ConfigError

PROG = "pytest-e2b-env docs"


def topics(root: Path) -> dict[str, Path]:
    """Topic name (the page's file name without ``.md``) -> page, in name order."""
    return {page.stem: page for page in sorted(root.glob("*.md"))}


def title(page: Path) -> str:
    """The page's first heading, without its ``#`` marks (the one line ``docs`` lists)."""
    with page.open(encoding="utf-8") as lines:
        for line in lines:
            if line.startswith("#"):
                return line.lstrip("#").strip()
    return ""


def topic_name(text: str) -> str:
    """What a reader may type for a page: ``plugin``, ``plugin.md`` or ``docs/plugin.md``."""
    name = text.strip().lower().removeprefix("docs/")
    return name.removesuffix(".md")


def listing(pages: dict[str, Path], root: Path) -> str:
    """Every topic with its title, then how to print one and where the files are."""
    width = max(map(len, pages), default=0)
    lines = [f"{PROG} TOPIC prints one of these pages:", ""]
    lines += [f"  {name.ljust(width)}  {title(page)}" for name, page in pages.items()]
    lines += ["", f"The pages are Markdown files in {root}"]
    return "\n".join(lines)


def _write(text: str) -> None:
    """Print ``text``; a reader that closed the pipe early (``| head``) is no error."""
    try:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
        sys.stdout.flush()
    except BrokenPipeError:
        # Python would report the failed flush again at exit: point stdout at /dev/null first.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


def main(argv: Sequence[str] | None = None) -> int:
    """List the topics, or print one page; 2 for an unknown topic or missing pages."""
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Print the documentation shipped with pytest-e2b-env; without TOPIC, list the topics.",
    )
    parser.add_argument("topic", nargs="?", metavar="TOPIC", help="a page, e.g. plugin or catalog")
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse printed the problem; --help exits 0
        return 0 if exc.code in (0, None) else 2
    try:
        root = docs_dir()
    except ConfigError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 2
    pages = topics(root)
    if args.topic is None:
        _write(listing(pages, root))
        return 0
    name = topic_name(args.topic)
    if name not in pages:
        close = difflib.get_close_matches(name, list(pages), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        known = ", ".join(pages)
        print(f"{PROG}: unknown topic {args.topic!r}; known topics: {known}{hint}", file=sys.stderr)
        return 2
    _write(pages[name].read_text(encoding="utf-8"))
    return 0
