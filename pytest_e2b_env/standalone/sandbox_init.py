"""Builds namespace sandboxes and serves as their pid 1: ``python -I -S init.py CTL LIFELINE``, assembled.

The emulator (host root) starts this script once per backend as a "zygote": it imports
everything once, then forks one builder per sandbox on request (the request carries the
sandbox's control socket). The builder does, with raw syscalls rather than util-linux tools:

1. As host root, enter the sandbox's memory cgroup, mount its size-capped tmpfs for the
   writable layer (private mount namespace) and lay out the copy-on-write upper dir (account
   files, masks over host secrets, opaque private /tmp, /root, /home).
2. Fork a throwaway child into a new user namespace and write its maps (sandbox uids 0..65535 =
   host ``base``..``base+65535``); keep the namespace fd.
3. In a private mount namespace, clone ``/`` without submounts, idmap it with that user
   namespace, make it read-only and attach it as the overlay's lower layer.
4. With internet, create the sandbox's network namespace as host root (the emulator attaches
   slirp4netns to it). Join the user namespace as its root (no capability left on the host),
   unshare mount, pid, ipc, uts (and net, owned by sandbox root, without internet), mount the
   overlay.
5. Fork the init (pid 1): fresh /proc, a minimal /dev, no /sys, pivot_root into the overlay and
   detach the old root so the host tree is unreachable.
6. The init reports ready and its host pid on the control socket, then loops: reaps orphans
   (SIGCHLD), serves file requests as the sandbox's users (setfsuid), and exits when the
   emulator's lifeline pipe reaches EOF (the emulator died, even by SIGKILL) or the control
   socket closes. Its exit makes the kernel kill every process in the pid namespace. When the
   socket closes (the emulator ends the sandbox), the init first kills and reaps them itself
   (:func:`end_all`): the kernel reaps what a dying init leaves without counting its CPU, so a
   sandbox's work would be missing from every ``getrusage`` up the emulator's tree.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import resource
import selectors
import signal
import socket
import struct
import sys
import time
from typing import Any

from . import frames, fsops
from . import linux as L
from .upper_layer import HOSTNAME, USER_UID, build_upper

DEV_NODES = ("null", "zero", "full", "random", "urandom", "tty")


# -- step 1: quotas and the writable layer -----------------------------------------------------


def join_cgroup(cfg: dict[str, Any]) -> None:
    """Enter the sandbox's memory and cpu cgroups first: everything of the sandbox is born in them.

    Where host root has CAP_SYS_RESOURCE, the init (forked from here) is the OOM killer's last
    choice in its sandbox: sandbox root cannot lower its own processes' score (that needs the
    same capability on the host), so a memory hog is killed before the init.
    """
    for path in cfg.get("cgroups") or ():
        with open(os.path.join(path, "cgroup.procs"), "w") as fh:
            fh.write(str(os.getpid()))
    if cfg.get("oom_first"):
        try:
            with open("/proc/self/oom_score_adj", "w") as fh:
                fh.write("-999")
        except PermissionError:
            pass  # a host root without CAP_SYS_RESOURCE: the init is scored like its commands


def private_layer(cfg: dict[str, Any]) -> bool:
    """Put the overlay's upper and work dirs on a size-capped tmpfs of this sandbox; True if done.

    Mounted in a private mount namespace of the builder, so the host never sees it and it is
    freed with the sandbox's last process. Overlay needs user xattrs on its upper layer
    (``userxattr``): tmpfs has them since Linux 6.6; on older kernels the layer stays on the
    host's disk without a quota. In the nested layout the tmpfs goes over ``/tmp`` of this
    private namespace instead of the sandbox's directory (below ``/var``): in a user namespace a
    mount below a system directory would lock that directory against becoming a lower layer.
    """
    L.unshare(L.CLONE_NEWNS)
    L.mount(None, "/", None, L.MS_REC | L.MS_PRIVATE)
    rw = cfg["rw"]
    at = "/tmp" if cfg.get("skeleton") is not None else rw
    L.mount("tmpfs", at, "tmpfs", 0, f"size={cfg['disk_mb']}m,nr_inodes={cfg['files']},mode=0755")
    try:
        os.setxattr(at, "user.pytest-e2b-env", b"1")
        os.removexattr(at, "user.pytest-e2b-env")
        capped = True
    except OSError:
        L.umount2(at, 0)
        capped = False
    if capped and at != rw:
        for key in ("upper", "work", "skeleton"):
            cfg[key] = at + cfg[key][len(rw) :]
    for path in (cfg["upper"], cfg["work"]):
        os.mkdir(path, 0o755)
    return capped


# -- steps 2-4: namespaces --------------------------------------------------------------------


def make_userns(base: int, max_procs: int, idmap: list[list[int]] | None = None) -> int:
    """A user namespace mapping 0..65535 to base..base+65535 (or ``idmap``), held by fd.

    The creator first becomes uid ``base`` (host root's view, or the emulator's user
    namespace's) with RLIMIT_NPROC = ``max_procs``: the kernel then caps the processes of the
    whole sandbox (every uid in it, root included) at that number, because they all count
    against the namespace owner's ucounts, whatever the map says. Without this a fork bomb in
    one sandbox would exhaust the host's pid space. ``idmap`` (``[inside, outside, count]``
    lines) is what a sandbox gets inside the emulator's own user namespace: a few ids of its own.
    """
    ready_r, ready_w = os.pipe()
    hold_r, hold_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(ready_r)
            os.close(hold_w)
            os.setgroups([])
            os.setresgid(base, base, base)
            resource.setrlimit(resource.RLIMIT_NPROC, (max_procs, max_procs))
            os.setresuid(base, base, base)
            L.unshare(L.CLONE_NEWUSER)
            os.write(ready_w, b"1")
            os.read(hold_r, 1)
        finally:
            os._exit(0)
    os.close(ready_w)
    os.close(hold_r)
    try:
        if os.read(ready_r, 1) != b"1":
            raise OSError(errno.ECHILD, "user namespace child died")
        # Written by root (of the host or of the emulator's user namespace), so any range that
        # root has is allowed; setgroups stays "allow" so setpriv --clear-groups and sudo work.
        lines = "".join(f"{a} {b} {c}\n" for a, b, c in idmap) if idmap else f"0 {base} 65536\n"
        for name in ("uid_map", "gid_map"):
            with open(f"/proc/{pid}/{name}", "w") as fh:
                fh.write(lines)
        return os.open(f"/proc/{pid}/ns/user", os.O_RDONLY | os.O_CLOEXEC)
    finally:
        os.close(ready_r)
        os.close(hold_w)
        os.waitpid(pid, 0)


def idmapped_lower(lower: str, userns_fd: int) -> None:
    """Attach ``/`` (no submounts), read-only and idmapped to the sandbox, at ``lower``."""
    L.unshare(L.CLONE_NEWNS)
    L.mount(None, "/", None, L.MS_REC | L.MS_PRIVATE)
    tree = L.open_tree(L.AT_FDCWD, "/", L.OPEN_TREE_CLONE | L.OPEN_TREE_CLOEXEC)
    try:
        L.mount_setattr(tree, "", L.AT_EMPTY_PATH, L.MOUNT_ATTR_IDMAP | L.MOUNT_ATTR_RDONLY, userns_fd)
        L.move_mount(tree, lower, L.MOVE_MOUNT_F_EMPTY_PATH)
    finally:
        os.close(tree)


def lo_up() -> None:
    """Bring the new network namespace's loopback up (E2B sandboxes have a working lo)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        iff_up_loopback_running = 0x1 | 0x8 | 0x40
        fcntl.ioctl(s.fileno(), 0x8914, struct.pack("16sH14x", b"lo", iff_up_loopback_running))


def enter_sandbox(cfg: dict[str, Any], userns_fd: int, overlays: list[str]) -> None:
    """Become the sandbox's root and create its other namespaces, then mount its root fs.

    ``overlays``: the nested layout's system directories, each its own overlay on the skeleton.
    """
    if cfg["network"] == "own":
        # Created by host root, so sandbox root has no privilege in it (no raw sockets, routes
        # or sysctls): the emulator attaches a user-space stack whose rules then hold for any code.
        L.unshare(L.CLONE_NEWNET)
        lo_up()
    L.setns(userns_fd, L.CLONE_NEWUSER)
    os.close(userns_fd)
    os.setgroups([])
    os.setresgid(0, 0, 0)
    os.setresuid(0, 0, 0)
    flags = L.CLONE_NEWNS | L.CLONE_NEWPID | L.CLONE_NEWIPC | L.CLONE_NEWUTS
    if cfg["network"] == "none":
        flags |= L.CLONE_NEWNET
    L.unshare(flags)
    socket.sethostname(HOSTNAME)
    if cfg["network"] == "none":
        lo_up()
    if cfg.get("skeleton") is None:
        opts = f"lowerdir={cfg['lower']},upperdir={cfg['upper']},workdir={cfg['work']},userxattr"
        L.mount("overlay", cfg["root"], "overlay", 0, opts)
        return
    skeleton = cfg["root"] = cfg["skeleton"]
    L.mount(skeleton, skeleton, None, L.MS_BIND | L.MS_REC)  # pivot_root wants a mount point
    cfg["read_only"] = []
    for name in overlays:
        here = os.path.join(skeleton, name)
        upper, work = os.path.join(cfg["upper"], name), os.path.join(cfg["work"], name)
        try:
            L.mount(
                "overlay", here, "overlay", 0, f"lowerdir=/{name},upperdir={upper},workdir={work},userxattr"
            )
        except OSError:
            # Mounts below /name are locked to it in this namespace, and overlayfs refuses a
            # lower layer that would uncover what they hide: it is seen read-only, as it is,
            # with what the sandbox must not see covered (an empty tmpfs, /dev/null).
            read_only_tree(f"/{name}", here)
            cfg["read_only"].append(name)
            for rel in cfg.get("hidden") or ():
                if rel.split("/", 1)[0] == name:
                    cover(os.path.join(skeleton, rel))


def cover(path: str) -> None:
    """Hide what is at ``path`` (an empty private directory, or an empty file)."""
    if os.path.isdir(path) and not os.path.islink(path):
        L.mount("tmpfs", path, "tmpfs", L.MS_NOSUID | L.MS_NODEV, "mode=1777,size=64m")
    elif os.path.lexists(path):
        L.mount("/dev/null", path, None, L.MS_BIND)


def read_only_tree(source: str, target: str) -> None:
    """Attach ``source`` with every mount below it, read-only, at ``target``."""
    tree = L.open_tree(L.AT_FDCWD, source, L.OPEN_TREE_CLONE | L.OPEN_TREE_CLOEXEC | L.AT_RECURSIVE)
    try:
        L.mount_setattr(tree, "", L.AT_EMPTY_PATH | L.AT_RECURSIVE, L.MOUNT_ATTR_RDONLY)
        L.move_mount(tree, target, L.MOVE_MOUNT_F_EMPTY_PATH)
    finally:
        os.close(tree)


# -- step 5: the init -------------------------------------------------------------------------


def host_pid() -> int:
    """This process's pid in the host's pid namespace (the host /proc is still mounted here)."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("NSpid:"):
                return int(line.split()[1])
    raise OSError(errno.ENOENT, "no NSpid line in /proc/self/status")


def build_root(root: str) -> None:
    """Fresh /proc, minimal /dev, then pivot into the overlay and drop the host tree."""
    L.mount("proc", f"{root}/proc", "proc", L.MS_NOSUID | L.MS_NODEV | L.MS_NOEXEC)
    dev = f"{root}/dev"
    L.mount("tmpfs", dev, "tmpfs", L.MS_NOSUID | L.MS_NOEXEC, "mode=755,size=1024k")
    for node in DEV_NODES:
        open(f"{dev}/{node}", "w").close()
        L.mount(f"/dev/{node}", f"{dev}/{node}", None, L.MS_BIND)
    for sub in ("pts", "shm", "mqueue"):
        os.mkdir(f"{dev}/{sub}")
    L.mount(
        "devpts", f"{dev}/pts", "devpts", L.MS_NOSUID | L.MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620"
    )
    L.mount("tmpfs", f"{dev}/shm", "tmpfs", L.MS_NOSUID | L.MS_NODEV, "mode=1777,size=256m")
    L.mount("mqueue", f"{dev}/mqueue", "mqueue", L.MS_NOSUID | L.MS_NODEV | L.MS_NOEXEC)
    os.symlink("pts/ptmx", f"{dev}/ptmx")
    for name, target in (
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
    ):
        os.symlink(target, f"{dev}/{name}")
    os.symlink("/proc/self/fd/2", f"{dev}/stderr")
    os.chdir(root)
    L.pivot_root(".", ".")
    L.umount2(".", L.MNT_DETACH)
    os.chdir("/")


class Agent:
    """Serves file requests from the emulator with the permissions of the sandbox user asked for."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        # Owner names come from the sandbox's own /etc/passwd, parsed: no NSS module gets loaded.
        self.fs = fsops.RootedFS(
            os.open("/", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC), accounts_in_root=True
        )

    def handle(self) -> bool:
        """Serve one request; False when the emulator closed the socket.

        Every reply repeats the request's ``id``, and nothing here may block on the sandbox's
        files (non-blocking opens, regular files only, capped sizes, iterative walks): a
        request the init cannot finish would leave the channel out of step.
        """
        msg = frames.recv(self.sock)
        if msg is None:
            return False
        req, data = msg
        tag = {"id": req.get("id")}
        uid = USER_UID if req.get("user") == "user" else 0
        L.setfsgid(uid)
        L.setfsuid(uid)
        try:
            result, out = self.run(req, data)
            reply: tuple[dict[str, Any], bytes | None] = ({**tag, "ok": result}, out)
        except OSError as exc:
            code = exc.errno or errno.EIO
            reply = ({**tag, "errno": code, "message": exc.strerror or str(exc)}, None)
        except (ValueError, TypeError, KeyError, RecursionError, MemoryError) as exc:
            reply = ({**tag, "value_error": str(exc)[:2000] or type(exc).__name__}, None)
        finally:
            L.setfsuid(0)
            L.setfsgid(0)
        frames.send(self.sock, *reply)
        return True

    def run(self, req: dict[str, Any], data: bytes | None) -> tuple[Any, bytes | None]:
        """Dispatch one operation."""
        op, path = req["op"], req.get("path", "/")
        fs = self.fs
        limit = int(req.get("limit") or fsops.MAX_READ)
        if op == "read":
            return None, fs.read(path, limit)
        if op == "write":
            return fs.write(path, data or b"", limit), None
        if op == "stat":
            return fs.stat(path), None
        if op == "listdir":
            entries = int(req.get("max_entries") or fsops.MAX_ENTRIES)
            depth = int(req.get("max_depth") or fsops.MAX_DEPTH)
            return fs.listdir(path, int(req["depth"]), entries, depth), None
        if op == "mkdir":
            return fs.mkdir(path), None
        if op == "move":
            return fs.move(path, req["dst"]), None
        if op == "remove":
            fs.remove(path)
            return None, None
        if op == "isdir":
            os.close(fs.open(path, os.O_PATH | os.O_DIRECTORY))
            return True, None
        raise ValueError(f"unknown op {op!r}")


def reap(_signum: int, _frame: object) -> None:
    """Reap every exited child (orphans are reparented to this init)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


#: How long :func:`end_all` keeps killing and reaping before it leaves the rest to the kernel.
END_SECONDS = 1.0


def end_all(seconds: float = END_SECONDS) -> None:
    """Kill every other process of this pid namespace and reap them, so their CPU is counted.

    A dying init's namespace is emptied by the kernel, which reaps the orphans it had adopted
    with SIGCHLD ignored: their CPU (a persistent server's, and that of every child it reaped)
    then reaches no parent's ``getrusage``. Reaped here, it reaches this init's, which its
    parent collects. Bounded: a process that will not die by ``seconds`` is left to the kernel.
    """
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # reaped below, not by the handler meanwhile
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            os.kill(-1, signal.SIGKILL)  # every process of the namespace but this one
        try:
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass
        except ChildProcessError:
            return  # none left
        time.sleep(0.002)


def init_main(cfg: dict[str, Any], sock: socket.socket, lifeline: int) -> None:
    """Pid 1 of the sandbox."""
    L.prctl(L.PR_SET_DUMPABLE, 0)
    outside_pid = host_pid()
    build_root(cfg["root"])
    os.umask(0o022)
    null = os.open("/dev/null", os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.close(null)
    low = 3
    for keep in sorted((lifeline, sock.fileno())):
        os.closerange(low, keep)
        low = keep + 1
    os.closerange(low, 1 << 16)
    signal.signal(signal.SIGCHLD, reap)
    agent = Agent(sock)
    ready = {"ready": True, "init_pid": outside_pid, "disk_quota": cfg["disk_quota"]}
    frames.send(sock, {**ready, "read_only": cfg.get("read_only", [])})
    sel = selectors.DefaultSelector()
    sel.register(lifeline, selectors.EVENT_READ)
    sel.register(sock, selectors.EVENT_READ)
    while True:
        for key, _ in sel.select():
            if key.fileobj == lifeline:
                if not os.read(lifeline, 1):
                    os._exit(0)  # the emulator is gone
            elif not agent.handle():
                end_all()  # the emulator ends this sandbox
                os._exit(0)


def build_sandbox(cfg: dict[str, Any], sock: socket.socket, lifeline: int) -> None:
    """Runs in a child of the zygote: steps 1-5, then this process exits and its child is the init."""
    try:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # make_userns waits for its own child
        # Dies with the zygote, which outlives any sandbox start.
        L.prctl(L.PR_SET_PDEATHSIG, signal.SIGKILL)
        join_cgroup(cfg)
        cfg["disk_quota"] = private_layer(cfg)
        overlays = build_upper(cfg)
        userns_fd = make_userns(cfg["base"], cfg["max_procs"], cfg.get("idmap"))
        if cfg.get("skeleton") is None:
            idmapped_lower(cfg["lower"], userns_fd)
        enter_sandbox(cfg, userns_fd, overlays)
        if os.fork() == 0:
            try:
                init_main(cfg, sock, lifeline)
            except BaseException as exc:
                frames.send(sock, {"error": f"sandbox init failed: {type(exc).__name__}: {exc}"})
            finally:
                os._exit(1)
    except BaseException as exc:
        frames.send(sock, {"error": f"sandbox setup failed: {type(exc).__name__}: {exc}"})
        os._exit(1)
    os._exit(0)


def zygote(ctl: socket.socket, lifeline: int) -> None:
    """Fork one builder per start request (pre-imported, so a start skips interpreter start-up)."""
    # Inits outlive their builders; as subreaper the zygote adopts and reaps them, so they
    # stay in the emulator's process tree instead of piling up under the host's pid 1.
    L.prctl(L.PR_SET_CHILD_SUBREAPER, 1)
    signal.signal(signal.SIGCHLD, reap)
    sel = selectors.DefaultSelector()
    sel.register(lifeline, selectors.EVENT_READ)
    sel.register(ctl, selectors.EVENT_READ)
    while True:
        for key, _ in sel.select():
            if key.fileobj == lifeline:
                if not os.read(lifeline, 1):
                    os._exit(0)  # the emulator is gone
                continue
            msg, fds, _flags, _addr = socket.recv_fds(ctl, 1 << 16, 1)
            if not msg:
                os._exit(0)  # the emulator closed the backend
            if len(fds) != 1:
                for fd in fds:
                    os.close(fd)
                continue
            sock = socket.socket(fileno=fds[0])
            try:
                pid = os.fork()
            except OSError as exc:
                frames.send(sock, {"error": f"fork failed: {exc}"})
                sock.close()
                continue
            if pid == 0:
                sel.close()
                ctl.close()
                build_sandbox(json.loads(msg), sock, lifeline)
            sock.close()


def main() -> None:
    """Entry point: ``init.py CTL_FD LIFELINE_FD`` (this module assembled) runs the zygote."""
    ctl = socket.socket(fileno=int(sys.argv[1]))
    zygote(ctl, int(sys.argv[2]))


if __name__ == "__main__":
    main()
