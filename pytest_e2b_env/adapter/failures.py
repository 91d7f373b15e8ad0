"""How the plugin's items fail in pytest's reports: the whole account, named once by one line."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

#: A failure's one-line name in reports (pytest's own ``message`` budget is 500 characters).
MAX_SUMMARY = 300


def one_line_repr(
    excinfo: pytest.ExceptionInfo[BaseException],
    summary: str,
    where: tuple[str, int] | None = None,
    prefix: bool = True,
) -> Any:
    """The exception's text as the failure, named by ``summary``'s first line (at ``where``).

    pytest's ``--junitxml`` writes a failure's crash message as ``<failure message=...>`` and its
    whole text as the element's text; a plain string is both, so every failure was said twice.
    Here the text is the exception's message alone (``prefix``: after its type's name) and the
    crash message one line, which is also what ``-ra`` and ``--tb=line`` print. It survives
    xdist's report serialization (the crash, the entries and the chain all travel).
    """
    rep = excinfo.getrepr(style="value")
    lines = summary.strip().splitlines()
    line = lines[0] if lines else type(excinfo.value).__name__
    crash = rep.reprcrash
    if crash is not None:
        path, lineno = where if where is not None else (crash.path, crash.lineno)
        crash = dataclasses.replace(crash, path=path, lineno=lineno, message=line[:MAX_SUMMARY])
        rep.reprcrash = crash
        chain = getattr(rep, "chain", None)  # xdist rebuilds the crash from the chain's last link
        if chain:
            traceback, _, description = chain[-1]
            rep.chain = [*chain[:-1], (traceback, crash, description)]  # type: ignore[union-attr]
    entries = rep.reprtraceback.reprentries
    if prefix and entries and getattr(entries[-1], "lines", None):
        entry = entries[-1]
        entry.lines = [f"{type(excinfo.value).__name__}: {entry.lines[0]}", *entry.lines[1:]]
    return rep
