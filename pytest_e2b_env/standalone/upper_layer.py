"""The sandbox's own overlay layer, laid out by host root before the sandbox exists.

Account files (``user`` = uid 1000, generated shadow files without host hashes, a sudoers
entry), opaque empty directories over private places and whiteouts over host entries the
sandbox must not see. Owners are the sandbox's ids as seen from outside: ``base`` + id when the
sandbox has a whole range (host root), or the few ids of its ``idmap`` (in the emulator's own
user namespace, where unknown ids become the sandbox's root).

Two layouts. As host root, one overlay over the whole host ``/`` (idmapped): one upper layer.
In a user namespace, where ``/`` cannot be a lower layer (the mounts below it are locked to it),
a skeleton root on the sandbox's tmpfs holds the private top-level places and one overlay per
system directory (``/etc``, ``/usr``, ...), each with its own upper layer ``upper/<name>``: the
same relative paths land in the same places.

Run by the sandbox's builder (``sandbox_init``), as root of the host or of that user namespace.
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
#: Top-level places the kernel's own file systems fill (or that stay empty): never an overlay.
MOUNTED_TOP = ("proc", "dev", "sys")
_MODES = {"root": 0o700, "tmp": 0o1777, "var/tmp": 0o1777}


class Owners:
    """Sandbox ids -> the ids they have outside: ``base + id``, or through the sandbox's ``idmap``.

    ``idmap`` lists ``[inside, outside, count]`` ranges; an id it does not map is given to the
    sandbox's root. :meth:`of_host` is for an owner copied from the host's tree: as host root it
    keeps its id (shifted); inside a user namespace the host's owners are not ids the builder
    knows (they read as the overflow id 65534), so copies belong to the sandbox's root.
    """

    def __init__(self, cfg: dict[str, Any]) -> None:
        self.base = int(cfg["base"])
        self.idmap = [(int(a), int(b), int(c)) for a, b, c in cfg.get("idmap") or ()]

    def __call__(self, inside: int) -> int:
        if not self.idmap:
            return self.base + inside
        for first, out, count in self.idmap:
            if first <= inside < first + count:
                return out + inside - first
        return self.base

    def of_host(self, host_id: int) -> int:
        """The owner a copy of a host directory gets (see the class docstring)."""
        return self(0 if self.idmap else host_id)


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


def _upper_dirs(upper: str, rel: str, out: Owners) -> str:
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
            os.chown(path, out.of_host(uid), out.of_host(gid))
    return path


def _opaque(upper: str, rel: str, out: Owners, mode: int, owner: int = 0) -> None:
    """An opaque directory: hides whatever the host has at ``rel``."""
    parent = _upper_dirs(upper, os.path.dirname(rel), out)
    path = os.path.join(parent, os.path.basename(rel))
    os.mkdir(path)
    os.setxattr(path, "user.overlay.opaque", b"y")
    os.chmod(path, mode)
    os.chown(path, out(owner), out(owner))


def _put(upper: str, rel: str, out: Owners, text: str, mode: int = 0o644, gid: int = 0) -> None:
    parent = _upper_dirs(upper, os.path.dirname(rel), out)
    path = os.path.join(parent, os.path.basename(rel))
    with open(path, "w") as fh:
        fh.write(text)
    os.chmod(path, mode)
    os.chown(path, out(0), out(gid))


def _accounts(upper: str, out: Owners) -> None:
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
    _put(upper, "etc/passwd", out, "\n".join(users) + "\n")
    _put(upper, "etc/group", out, "\n".join(groups) + "\n")
    shadow = "".join(f"{u.split(':')[0]}:*:19000:0:99999:7:::\n" for u in users)
    gshadow = "".join(f"{g.split(':')[0]}:*::\n" for g in groups)
    for name in ("shadow", "shadow-"):
        _put(upper, f"etc/{name}", out, shadow, 0o640, shadow_gid)
    for name in ("gshadow", "gshadow-"):
        _put(upper, f"etc/{name}", out, gshadow, 0o640, shadow_gid)
    _put(upper, "etc/sudoers.d/90-e2b-user", out, "user ALL=(ALL:ALL) NOPASSWD: ALL\n", 0o440)
    try:
        with open("/etc/hosts") as fh:
            hosts = fh.read()
    except OSError:
        hosts = "127.0.0.1 localhost\n"
    _put(upper, "etc/hosts", out, hosts.rstrip("\n") + f"\n127.0.1.1 {HOSTNAME}\n")
    _put(upper, "etc/hostname", out, HOSTNAME + "\n")


def _whiteout(upper: str, rel: str, out: Owners) -> None:
    """Make ``rel`` vanish from the merged tree (an overlay whiteout: a 0/0 character device)."""
    parent = _upper_dirs(upper, os.path.dirname(rel), out)
    os.mknod(os.path.join(parent, os.path.basename(rel)), stat.S_IFCHR | 0o600, os.makedev(0, 0))


def build_upper(cfg: dict[str, Any]) -> list[str]:
    """The sandbox's own layer(s): accounts, masks over host entries, empty private dirs.

    Returns the system directories that get an overlay of their own (nested layout), else [].
    """
    out = Owners(cfg)
    upper = cfg["upper"]
    for path in (upper, cfg["work"]):
        os.chown(path, out(0), out(0))
    nested = cfg.get("skeleton") is not None
    overlays = _skeleton(cfg, out) if nested else []
    _accounts(upper, out)
    opaque, whiteouts = host_masks(tuple(cfg.get("private", ())))
    # What to cover where a directory cannot get an overlay (the nested layout's fallback).
    cfg["hidden"] = [rel for rel in [*opaque, *whiteouts] if "/" in rel]
    for rel in opaque:
        if nested and "/" not in rel:  # a top-level place is the skeleton's own directory
            continue
        _opaque(upper, rel, out, _MODES.get(rel, 0o755))
    home = os.path.join(cfg.get("skeleton") or upper, "home", "user")
    os.mkdir(home)
    os.chmod(home, 0o755)
    os.chown(home, out(USER_UID), out(USER_UID))
    for rel in whiteouts:
        if nested and "/" not in rel:  # the skeleton never had it
            continue
        _whiteout(upper, rel, out)
    return overlays


def _skeleton(cfg: dict[str, Any], out: Owners) -> list[str]:
    """The nested layout's root: system entries (directories get an overlay each), private places."""
    skeleton, upper, work = cfg["skeleton"], cfg["upper"], cfg["work"]
    os.mkdir(skeleton, 0o755)
    os.chown(skeleton, out(0), out(0))
    overlays = []
    for name in sorted(os.listdir("/")):
        host, here = "/" + name, os.path.join(skeleton, name)
        if name not in VISIBLE_TOP:
            continue
        if os.path.islink(host):
            os.symlink(os.readlink(host), here)
            os.lchown(here, out(0), out(0))
        elif os.path.isdir(host):
            mode = stat.S_IMODE(os.stat(host).st_mode)
            os.mkdir(here)
            os.chmod(here, mode)
            os.chown(here, out(0), out(0))
            if name not in MOUNTED_TOP:
                _upper_dirs(upper, name, out)
                os.mkdir(os.path.join(work, name), 0o700)
                os.chown(os.path.join(work, name), out(0), out(0))
                overlays.append(name)
    for rel in OPAQUE:
        if "/" not in rel:
            path = os.path.join(skeleton, rel)
            os.mkdir(path)
            os.chmod(path, _MODES.get(rel, 0o755))
            os.chown(path, out(0), out(0))
    return overlays
