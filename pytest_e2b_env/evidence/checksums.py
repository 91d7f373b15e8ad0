"""SHA256SUMS: write it over every file of a bundle, and check a bundle against it.

The format is the one ``sha256sum -c`` reads (``<hex>  <relative path>``), sorted by path,
so a reviewer can recheck a bundle with coreutils alone.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

SUMS_NAME = "SHA256SUMS"


def sha256_file(path: Path) -> str:
    """Hex SHA-256 of a file's bytes."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 16), b""):
            digest.update(block)
    return digest.hexdigest()


def bundle_files(root: Path) -> list[str]:
    """Relative POSIX paths of every regular file and symlink under ``root`` except SHA256SUMS."""
    found = [
        path.relative_to(root).as_posix()
        for path in root.rglob("*")
        if (path.is_file() or path.is_symlink()) and path.relative_to(root).as_posix() != SUMS_NAME
    ]
    return sorted(found)


def write_sums(root: Path) -> Path:
    """Write ``root/SHA256SUMS`` covering every other file under ``root``; return its path."""
    lines = [f"{sha256_file(root / rel)}  {rel}\n" for rel in bundle_files(root)]
    target = root / SUMS_NAME
    target.write_text("".join(lines), encoding="utf-8")
    return target


def check_sums(root: Path) -> list[str]:
    """Problems found comparing ``root`` with its SHA256SUMS (empty when everything matches)."""
    sums = root / SUMS_NAME
    if not sums.is_file():
        return [f"{SUMS_NAME} is missing from {root}; the bundle cannot be checked. Rewrite the bundle."]
    problems: list[str] = []
    listed: dict[str, str] = {}
    for number, line in enumerate(sums.read_text(encoding="utf-8").splitlines(), start=1):
        digest, sep, rel = line.partition("  ")
        if not sep or len(digest) != 64 or not rel:
            problems.append(f"{SUMS_NAME} line {number} is malformed: {line[:120]!r}")
            continue
        parts = Path(rel).parts
        if rel.startswith("/") or ".." in parts:
            problems.append(f"{SUMS_NAME} line {number} names a path outside the bundle: {rel!r}")
            continue
        if rel in listed:
            problems.append(f"{SUMS_NAME} lists {rel!r} twice")
        listed[rel] = digest.lower()
    present = set(bundle_files(root))
    for rel in sorted(present - set(listed)):
        problems.append(f"{rel} is not covered by {SUMS_NAME} (added after the bundle was written?)")
    for rel, digest in sorted(listed.items()):
        path = root / rel
        if rel not in present:
            problems.append(f"{rel} is listed in {SUMS_NAME} but missing from the bundle")
        elif path.is_symlink():
            problems.append(f"{rel} is a symlink; a bundle holds regular files only")
        elif sha256_file(path) != digest:
            problems.append(f"{rel} does not match its SHA-256 in {SUMS_NAME} (modified after writing)")
    return problems
