"""The sandbox's own overlay layer, laid out by host root before the sandbox exists.

Account files (``user`` = uid 1000, generated shadow files without host hashes, a sudoers
entry), opaque empty directories over private places and whiteouts over host entries the
sandbox must not see. Owners are shifted into the sandbox's uid range (``base`` + id).

Run by the sandbox's builder (``sandbox_init``), as host root.
"""

from __future__ import annotations

import contextlib
import os
import stat
from typing import Any

USER_UID = 1000
HOSTNAME = "e2b"
#: Top-level host entries a sandbox sees (read-only lower layer, copy-on-write).
_SYSTEM = "bin boot dev etc lib lib32 lib64 libx32 media proc sbin srv sys usr var"
VISIBLE_TOP = frozenset(_SYSTEM.split(" "))
#: Places a sandbox gets empty and private (E2B's template has nothing there, the host may).
OPAQUE = ("root", "home", "tmp", "var/tmp", "run", "mnt", "opt")


def host_masks(private: tuple[str, ...] = ()) -> tuple[list[str], list[str]]:
    """Host entries the sandbox must not see, as (opaque empty dirs, whiteouts).

    The sandbox keeps the system part of the host's tree (programs, libraries, /etc) and gets
    its own empty /root, /home/user, /tmp, /var/tmp, /run, /mnt and /opt (E2B's template has
    nothing there, and the host's may hold anything); every other top-level entry (the project
    checkout, CI workspaces, machine-specific folders), ``private`` paths below system places
    and the host's SSH keys disappear.
    """
    opaque = list(OPAQUE)
    whiteouts: list[str] = []
    with contextlib.suppress(OSError):
        whiteouts += [n for n in sorted(os.listdir("/")) if n not in VISIBLE_TOP and n not in opaque]
    with contextlib.suppress(OSError):
        whiteouts += [f"etc/ssh/{n}" for n in sorted(os.listdir("/etc/ssh")) if n.startswith("ssh_host_")]
    for path in private:
        # The emulator's checkout or package when it lives below a system place (/srv/x,
        # /var/lib/x...); a whole system directory is never hidden.
        rel = os.path.normpath(path).strip("/")
        if rel.count("/") >= 1 and rel.split("/")[0] in VISIBLE_TOP and os.path.lexists("/" + rel):
            whiteouts.append(rel)
    return opaque, whiteouts


def _upper_dirs(upper: str, rel: str, base: int) -> str:
    """Create ``upper/rel`` mirroring the lower directory's mode and (shifted) owner."""
    path = upper
    for part in [p for p in rel.split("/") if p]:
        path = os.path.join(path, part)
        lower = "/" + os.path.relpath(path, upper)
        if not os.path.isdir(path):
            try:
                info = os.stat(lower)
                mode, uid, gid = stat.S_IMODE(info.st_mode), info.st_uid, info.st_gid
            except OSError:
                mode, uid, gid = 0o755, 0, 0
            os.mkdir(path)
            os.chmod(path, mode)
            os.chown(path, base + uid, base + gid)
    return path


def _opaque(upper: str, rel: str, base: int, mode: int, owner: int = 0) -> None:
    """An opaque directory: hides whatever the host has at ``rel``."""
    parent = _upper_dirs(upper, os.path.dirname(rel), base)
    path = os.path.join(parent, os.path.basename(rel))
    os.mkdir(path)
    os.setxattr(path, "user.overlay.opaque", b"y")
    os.chmod(path, mode)
    os.chown(path, base + owner, base + owner)


def _put(upper: str, rel: str, base: int, text: str, mode: int = 0o644, gid: int = 0) -> None:
    parent = _upper_dirs(upper, os.path.dirname(rel), base)
    path = os.path.join(parent, os.path.basename(rel))
    with open(path, "w") as fh:
        fh.write(text)
    os.chmod(path, mode)
    os.chown(path, base, base + gid)


def _accounts(upper: str, base: int) -> None:
    """passwd/group with the E2B ``user`` (uid 1000) and generated shadow files (no host hashes)."""
    with open("/etc/passwd") as fh:
        users = [
            line
            for line in fh.read().splitlines()
            if line and line.split(":")[0] != "user" and line.split(":")[2:3] != [str(USER_UID)]
        ]
    users.append(f"user:x:{USER_UID}:{USER_UID}::/home/user:/bin/bash")
    with open("/etc/group") as fh:
        groups = [
            line
            for line in fh.read().splitlines()
            if line and line.split(":")[0] != "user" and line.split(":")[2:3] != [str(USER_UID)]
        ]
    groups.append(f"user:x:{USER_UID}:")
    shadow_gid = next((int(g.split(":")[2]) for g in groups if g.startswith("shadow:")), 0)
    _put(upper, "etc/passwd", base, "\n".join(users) + "\n")
    _put(upper, "etc/group", base, "\n".join(groups) + "\n")
    shadow = "".join(f"{u.split(':')[0]}:*:19000:0:99999:7:::\n" for u in users)
    gshadow = "".join(f"{g.split(':')[0]}:*::\n" for g in groups)
    for name in ("shadow", "shadow-"):
        _put(upper, f"etc/{name}", base, shadow, 0o640, shadow_gid)
    for name in ("gshadow", "gshadow-"):
        _put(upper, f"etc/{name}", base, gshadow, 0o640, shadow_gid)
    _put(upper, "etc/sudoers.d/90-e2b-user", base, "user ALL=(ALL:ALL) NOPASSWD: ALL\n", 0o440)
    try:
        with open("/etc/hosts") as fh:
            hosts = fh.read()
    except OSError:
        hosts = "127.0.0.1 localhost\n"
    _put(upper, "etc/hosts", base, hosts.rstrip("\n") + f"\n127.0.1.1 {HOSTNAME}\n")
    _put(upper, "etc/hostname", base, HOSTNAME + "\n")


def _whiteout(upper: str, rel: str, base: int) -> None:
    """Make ``rel`` vanish from the merged tree (an overlay whiteout: a 0/0 character device)."""
    parent = _upper_dirs(upper, os.path.dirname(rel), base)
    os.mknod(os.path.join(parent, os.path.basename(rel)), stat.S_IFCHR | 0o600, os.makedev(0, 0))


def build_upper(cfg: dict[str, Any]) -> None:
    """The sandbox's own layer: accounts, masks over host entries, empty private dirs."""
    upper, base = cfg["upper"], cfg["base"]
    os.chown(upper, base, base)
    os.chown(cfg["work"], base, base)
    _accounts(upper, base)
    modes = {"root": 0o700, "tmp": 0o1777, "var/tmp": 0o1777}
    opaque, whiteouts = host_masks(tuple(cfg.get("private", ())))
    for rel in opaque:
        _opaque(upper, rel, base, modes.get(rel, 0o755))
    home = os.path.join(upper, "home", "user")
    os.mkdir(home)
    os.chmod(home, 0o755)
    os.chown(home, base + USER_UID, base + USER_UID)
    for rel in whiteouts:
        _whiteout(upper, rel, base)
