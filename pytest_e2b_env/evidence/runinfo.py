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


# Bounds on a subject's source digest: a subject inside a huge package must not stall the bundle.
_MAX_SOURCE_FILES = 2000
_MAX_SOURCE_BYTES = 64 * 1024 * 1024


def subject_source(spec: str) -> dict[str, Any]:
    """What pins the code of a ``module:attr`` subject without git: its module file and a digest.

    The digest is SHA-256 over the relative path and bytes of every ``.py`` file of the package
    holding the subject's module (or of the module alone when it is top level), in sorted order.
    ``find_spec`` imports only the module's parent packages.
    """
    import importlib.util

    module = spec.partition(":")[0]
    info: dict[str, Any] = {"spec": spec, "module_file": None, "files": 0, "sha256": None}
    try:
        found = importlib.util.find_spec(module)
    except (ImportError, ValueError) as exc:
        info["error"] = f"{type(exc).__name__}: module {module!r} not found"
        return info
    if found is None or not found.origin or not Path(found.origin).is_file():
        info["error"] = f"module {module!r} has no source file"
        return info
    origin = Path(found.origin).resolve()
    info["module_file"] = str(origin)
    root = origin.parent if "." in module or found.submodule_search_locations else None
    paths = sorted(p for p in root.rglob("*.py") if "__pycache__" not in p.parts) if root else [origin]
    if len(paths) > _MAX_SOURCE_FILES:
        info["error"] = f"{len(paths)} source files under {root}: more than {_MAX_SOURCE_FILES}, not digested"
        return info
    digest = hashlib.sha256()
    total = 0
    for path in paths:
        try:
            data = path.read_bytes()
        except OSError as exc:
            info["error"] = f"{path} unreadable ({type(exc).__name__}), not digested"
            return info
        total += len(data)
        if total > _MAX_SOURCE_BYTES:
            info["error"] = f"sources under {root} exceed {_MAX_SOURCE_BYTES} bytes, not digested"
            return info
        name = str(path.relative_to(root)) if root else path.name
        digest.update(name.encode() + b"\0" + data + b"\0")
    info.update(files=len(paths), sha256=digest.hexdigest(), root=str(root or origin.parent))
    return info
