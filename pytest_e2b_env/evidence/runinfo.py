"""Facts about the run the writer records itself: time, argv, git state, platform, versions."""

from __future__ import annotations

import hashlib
import platform
import re
import subprocess
import sys
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

# Distributions whose versions decide what a run proves; missing ones are recorded as None.
PACKAGES = (
    "pytest-e2b-env",
    "e2b",
    "openenv",
    "trl",
    "transformers",
    "torch",
    "pytest",
    "pytest-xdist",
    "pytest-asyncio",
    "pydantic",
    "junit-xml",
    "uvicorn",
    "starlette",
)

# argv options whose *next* argument is a credential ("--api-key VALUE").
_SECRET_OPTION = re.compile(r"(?i)^--?[\w-]*(key|token|secret|password|passwd)$")


def utc_now() -> str:
    """Current UTC time as ISO 8601 with a ``Z`` suffix, microseconds kept for ordering."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def iso_utc(epoch: float) -> str:
    """A ``time.time()`` value in the same ISO 8601 UTC form as :func:`utc_now`."""
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def safe_argv(argv: list[str]) -> list[str]:
    """``argv`` with the value after a credential-named option replaced (patterns catch the rest)."""
    out: list[str] = []
    hide_next = False
    for arg in argv:
        out.append("[REDACTED]" if hide_next else arg)
        hide_next = bool(_SECRET_OPTION.match(arg))
    return out


def _git(cwd: Path, *args: str) -> subprocess.CompletedProcess[bytes] | None:
    try:
        return subprocess.run(
            ["git", *args], cwd=cwd, capture_output=True, timeout=10, check=False, stdin=subprocess.DEVNULL
        )
    except (OSError, subprocess.SubprocessError):
        return None


def git_state(cwd: Path | None = None) -> dict[str, Any]:
    """HEAD commit, whether the work tree is dirty, and a digest of the uncommitted changes.

    The digest (SHA-256 of ``git diff HEAD`` plus the untracked file list) identifies the exact
    code that ran without copying any of it into the bundle.
    """
    where = Path.cwd() if cwd is None else cwd
    head = _git(where, "rev-parse", "HEAD")
    if head is None or head.returncode != 0:
        inside = _git(where, "rev-parse", "--is-inside-work-tree")
        in_repo = inside is not None and inside.returncode == 0
        return {"head": None, "dirty": None, "dirty_digest": None, "repository": in_repo}
    status = _git(where, "status", "--porcelain", "--untracked-files=all")
    diff = _git(where, "diff", "HEAD", "--binary")
    status_out = status.stdout if status is not None else b""
    digest = hashlib.sha256()
    digest.update(diff.stdout if diff is not None else b"")
    digest.update(status_out)
    dirty = bool(status_out.strip())
    return {
        "head": head.stdout.decode().strip(),
        "dirty": dirty,
        "dirty_digest": digest.hexdigest() if dirty else None,
        "repository": True,
    }


def package_versions(names: tuple[str, ...] = PACKAGES) -> dict[str, str | None]:
    """Installed version of each distribution (None when absent); nothing is imported."""
    versions: dict[str, str | None] = {}
    for name in names:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def platform_info() -> dict[str, Any]:
    """Python and platform facts that decide whether two runs are comparable."""
    return {
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "executable": sys.executable,
        "platform": platform.platform(),
        "machine": platform.machine(),
        "system": platform.system(),
    }
