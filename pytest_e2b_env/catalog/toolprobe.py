"""Hostile arguments for every tool an environment exposes, and whether its host was touched.

TRL calls a tool with whatever arguments the model wrote (``tool(**arguments)``): paths that climb
out of the work directory, absolute paths, megabytes of content, wrong types, missing or unknown
names. :class:`HostProbe` builds those calls for each tool (from its parameters, as the case host
reports them) and points every path at a directory of its own on the host, beside a canary file: a
tool whose host-side code follows the path (stages a file locally, reads one) writes into that
directory or returns the canary's text. In a sandbox the same paths lead nowhere.

Pure apart from the directory (:meth:`HostProbe.open`, :meth:`HostProbe.inspect`,
:meth:`HostProbe.close`); the driver makes the calls.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import tempfile
from collections.abc import Iterable
from typing import Any

#: How far a relative path climbs: past any working directory, to the root.
CLIMB = "../" * 32
#: Oversized content: far past an artifact (64 KiB), bounded for a shared machine.
OVERSIZE = (1 << 20) + 1
#: How long one probed tool call may take before its process is stopped (it must return or raise).
PROBE_SECONDS = 60.0
CANARY = "canary.txt"

_BENIGN: dict[str, Any] = {"int": 1, "float": 1.0, "bool": False, "list": [], "dict": {}}
_WRONG: dict[str, Any] = {"str": 12345, "int": "12345", "float": "1.5", "bool": "yes", "list": 7, "dict": 7}


def _kind(annotation: str | None) -> str:
    """The JSON-ish kind of an annotation (``str | None`` is str); unknown or absent is str."""
    text = (annotation or "str").replace("typing.", "").replace("Optional[", "").lower()
    for kind in ("str", "int", "float", "bool", "list", "dict"):
        if text.startswith(kind):
            return kind
    return "str"


def _named(params: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The parameters a model can name (no ``*args`` / ``**kwargs``)."""
    return [p for p in params if p.get("kind") not in ("VAR_POSITIONAL", "VAR_KEYWORD")]


def arguments(tool: str, params: list[dict[str, Any]], host_dir: str) -> list[tuple[str, dict[str, Any]]]:
    """The hostile calls of one tool: (label, keyword arguments), in order.

    Every string parameter takes the hostile value; the others a plain one of their kind, so the
    call reaches the code that uses the string.
    """
    named = _named(params)

    def each(string: Any) -> dict[str, Any]:
        return {
            p["name"]: string if _kind(p.get("annotation")) == "str" else _BENIGN[_kind(p.get("annotation"))]
            for p in named
        }

    calls: list[tuple[str, dict[str, Any]]] = [
        ("traversal", each(f"{CLIMB}{host_dir.lstrip('/')}/rel-{tool}")),
        ("absolute", each(f"{host_dir}/abs-{tool}")),
        ("canary", each(f"{CLIMB}{host_dir.lstrip('/')}/{CANARY}")),
        ("oversized", each("A" * OVERSIZE)),
        ("wrong-types", {p["name"]: _WRONG[_kind(p.get("annotation"))] for p in named}),
        ("nulls", {p["name"]: None for p in named}),
        ("nested", {p["name"]: {"path": [f"{CLIMB}etc/passwd"], "n": [1, 2]} for p in named}),
        ("missing", {}),
        ("unknown", {**each("probe.txt"), "pe2b_unexpected": 1}),
    ]
    return calls


class HostProbe:
    """A host directory the hostile paths point at, with a canary whose text must never come back."""

    def __init__(self) -> None:
        self.dir = ""
        self.token = secrets.token_hex(16)
        self._canary_stat: tuple[int, float] | None = None

    def open(self) -> HostProbe:
        """Make the directory and its canary (0700: the case host runs as this account, nobody else)."""
        self.dir = tempfile.mkdtemp(prefix="pe2b-host-")
        path = os.path.join(self.dir, CANARY)
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(f"pe2b-canary-{self.token}\n")
        st = os.stat(path)
        self._canary_stat = (st.st_size, st.st_mtime)
        return self

    def inspect(self, observed: Iterable[str]) -> dict[str, Any]:
        """What the subject did to the host: files it left, the canary changed, its text read back."""
        if not self.dir:
            return {"dir": None, "written": [], "canary_changed": False, "canary_read": False}
        written = []
        for folder, dirs, files in os.walk(self.dir):
            for name in dirs + files:
                rel = os.path.relpath(os.path.join(folder, name), self.dir)
                if rel != CANARY:
                    written.append(rel)
        try:
            st = os.stat(os.path.join(self.dir, CANARY))
            changed = (st.st_size, st.st_mtime) != self._canary_stat
        except OSError:
            changed = True
        read = any(self.token in text for text in observed)
        return {"dir": self.dir, "written": sorted(written), "canary_changed": changed, "canary_read": read}

    def close(self) -> None:
        """Remove the directory and whatever a subject left in it."""
        if self.dir:
            with contextlib.suppress(OSError):
                shutil.rmtree(self.dir)
