"""The namespaces level (being built): for now it reports itself unavailable."""

from __future__ import annotations

from pathlib import Path

from .process import ProcessBackend


def available(root: Path) -> tuple[bool, str]:
    """Whether this machine can run namespace sandboxes, and why (not yet)."""
    return False, "the namespaces level is not built yet"


class NamespaceBackend(ProcessBackend):
    """Placeholder until the namespaces level lands."""
