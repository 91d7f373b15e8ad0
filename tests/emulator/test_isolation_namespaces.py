"""Isolation properties of the namespaces level, each proven from inside and checked from the host."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from pytest_e2b_env.emulator.isolation import BASE_DIR, Backend, Box, select_backend
from pytest_e2b_env.emulator.isolation.ids import UID_BASE
from pytest_e2b_env.emulator.isolation.namespaces import MAX_PROCS, NamespaceBackend, NamespaceBox
from pytest_e2b_env.errors import EmulatorError

pytestmark = pytest.mark.namespaces


@pytest.fixture(scope="module")
def backend() -> Iterator[Backend]:
    """A namespaces backend, or a skip carrying the reason this machine cannot have one."""
    root = BASE_DIR / f"{os.getpid()}-ns-tests"
    try:
        chosen = select_backend(root=root, force="namespaces")
    except EmulatorError as exc:
        pytest.skip(str(exc))
    yield chosen
    chosen.close()


@pytest.fixture
def box(backend: Backend) -> Iterator[NamespaceBox]:
    """A sandbox without internet, killed after the test."""
    started = backend.start(f"n{uuid.uuid4().hex[:12]}", internet=False, envs={})
    assert isinstance(started, NamespaceBox)
    yield started
    started.kill()


def sh(box: Box, cmd: str, user: str = "user") -> tuple[int, str, str]:
    """Run ``cmd`` to completion in the sandbox: (exit code, stdout, stderr)."""
    proc = box.spawn(cmd, {}, "/home/user" if user == "user" else "/root", user, False)
    out, err = proc.communicate(timeout=60)
    return proc.returncode, out.decode(), err.decode()


def eventually(check: Callable[[], object], seconds: float = 10) -> object:
    """Poll ``check`` until truthy or ``seconds`` pass; returns its last value."""
    deadline = time.monotonic() + seconds
    while not (value := check()) and time.monotonic() < deadline:
        time.sleep(0.02)
    return value


def live_pids(needle: str) -> list[int]:
    """Host pids (zombies excluded) whose command line contains ``needle``."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                if needle.encode() in Path(f"/proc/{entry}/cmdline").read_bytes():
                    found.append(int(entry))
    return found


def gone(pid: int) -> bool:
    """True when ``pid`` has exited (missing or a zombie awaiting its reaper)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def rootless(box: Box) -> bool:
    """Whether the sandbox runs in the emulator's own user namespace (not root: few ids, no idmap)."""
    assert isinstance(box, NamespaceBox)
    return box._backend.ids.nested


def outside_ids(box: NamespaceBox) -> dict[int, int]:
    """The sandbox's ids -> the ids they have outside it (this process's view), from its uid map."""
    ids = {}
    for line in Path(f"/proc/{box.init_pid}/uid_map").read_text().splitlines():
        inside, outside, count = map(int, line.split())
        ids.update({inside + k: outside + k for k in range(min(count, 65536))})
    return ids


def host_uid(pid: int) -> int:
    """Real uid of a host process as the host sees it."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Uid:"):
            return int(line.split()[1])
    raise AssertionError(f"no Uid line for pid {pid}")


def test_sandbox_root_is_an_unprivileged_host_uid(box: NamespaceBox) -> None:
    """Root inside is uid 0 there and, outside, an id of its own: a shifted range of 65536 host ids
    (host root), or three subordinate ids of the emulator's user namespace (rootless), never the
    emulator's own id."""
    proc = box.spawn("id -u; cat /proc/self/uid_map; sleep 30", {}, "/root", "root", False)
    assert proc.stdout is not None
    assert proc.stdout.readline() == b"0\n"
    inside_map = proc.stdout.readline().split()
    assert inside_map[0] == b"0"
    if rootless(box):
        assert inside_map[2] == b"1"
        assert [proc.stdout.readline().split()[::2] for _ in range(2)] == [[b"1000", b"1"], [b"65534", b"1"]]
        assert int(inside_map[1]) != 0  # not the emulator's own id (0 of its namespace)
    else:
        assert int(inside_map[1]) >= UID_BASE
        assert inside_map[2] == b"65536"
    assert host_uid(proc.pid) == int(inside_map[1])
    box.signal(proc, signal.SIGKILL)
    proc.communicate(timeout=30)


def test_each_sandbox_gets_its_own_uid_range(backend: Backend, box: NamespaceBox) -> None:
    """Two sandboxes map their root to different host uids."""
    other = backend.start(f"n{uuid.uuid4().hex[:12]}", internet=False, envs={})
    try:
        maps = [Path(f"/proc/{b.init_pid}/uid_map").read_text().split()[1] for b in (box, other)]  # type: ignore[attr-defined]
        assert maps[0] != maps[1]
    finally:
        other.kill()


def test_root_writes_anywhere_but_only_in_its_copy(box: NamespaceBox) -> None:
    """Sandbox root can write /etc, /opt and /usr/local; the host's files stay untouched."""
    if rootless(box):
        pytest.skip("rootless: the host's directories are read-only to sandbox root (test_rootless_root_*)")
    name = f"e2b-probe-{uuid.uuid4().hex[:8]}"
    code, out, err = sh(
        box,
        f"mkdir -p /opt/{name} && echo hi > /opt/{name}/f && echo x > /etc/{name} && "
        f"touch /usr/local/bin/{name} && mount -o remount,rw / && touch /usr/bin/{name} && cat /opt/{name}/f",
        "root",
    )
    assert (code, out) == (0, "hi\n"), err
    for host_path in (f"/opt/{name}", f"/etc/{name}", f"/usr/local/bin/{name}", f"/usr/bin/{name}"):
        assert not os.path.lexists(host_path)
    assert sh(box, f"cat /etc/{name}")[1] == "x\n"  # visible to the sandbox's other users


def test_rootless_root_writes_its_own_places_not_the_hosts(box: NamespaceBox) -> None:
    """Rootless, sandbox root writes /opt, new files in /etc and the sandbox's generated files, but
    not into the host's directories (their owner has no id in the sandbox): the stated gap."""
    if not rootless(box):
        pytest.skip(
            "host root: sandbox root writes everywhere (test_root_writes_anywhere_but_only_in_its_copy)"
        )
    name = f"e2b-probe-{uuid.uuid4().hex[:8]}"
    code, out, err = sh(
        box,
        f"mkdir -p /opt/{name} && echo hi > /opt/{name}/f && echo x > /etc/{name} && "
        f"echo 127.0.0.2 extra >> /etc/hosts && cat /opt/{name}/f; "
        f"touch /usr/local/bin/{name}; echo usr=$?; stat -c %U /usr/bin",
        "root",
    )
    assert (code, out) == (0, "hi\nusr=1\nnobody\n"), err
    assert "Permission denied" in err
    for host_path in (f"/opt/{name}", f"/etc/{name}", f"/usr/local/bin/{name}"):
        assert not os.path.lexists(host_path)
    assert "127.0.0.2 extra" not in Path("/etc/hosts").read_text()
    assert sh(box, f"cat /etc/{name}")[1] == "x\n"


def test_user_cannot_write_system_places(box: NamespaceBox) -> None:
    """The unprivileged account gets permission errors outside its home, in commands and the files API."""
    code, _, err = sh(box, "touch /etc/nope")
    assert code != 0
    assert "Permission denied" in err
    with pytest.raises(PermissionError):
        box.fs.write("/etc/nope", b"x", "user")
    with pytest.raises(PermissionError):
        box.fs.listdir("/root", 1, "user")
    assert box.fs.write("/etc/yes", b"x", "root")["owner"] == "root"


def test_host_secrets_are_out_of_sight(box: NamespaceBox) -> None:
    """/etc/shadow, /root, /home, the project checkout and the host's /tmp are not visible, even to root."""
    host_tmp = Path("/tmp") / f"host-only-{uuid.uuid4().hex[:8]}"
    host_tmp.write_text("host")
    try:
        code, out, _ = sh(
            box,
            "cat /etc/shadow; echo ---; ls -A /root /home /tmp; echo ---; "
            f"ls {host_tmp} {Path.cwd()} /var/tmp/pytest-e2b-env 2>&1; true",
            "root",
        )
    finally:
        host_tmp.unlink()
    shadow, listing, missing = out.split("---\n")
    # generated, no password hash at all (the host's may be unreadable here, so not compared to it)
    assert shadow.splitlines()
    assert all(line.split(":")[1] == "*" for line in shadow.splitlines())
    assert listing.split() == ["/home:", "user", "/root:", "/tmp:"]
    assert missing.count("No such file or directory") == 3
    code, _, err = sh(box, "cat /etc/shadow")
    assert code != 0
    assert "Permission denied" in err


def test_tmp_is_private_per_sandbox(backend: Backend, box: NamespaceBox) -> None:
    """A file in one sandbox's /tmp is neither on the host's /tmp nor in another sandbox."""
    name = f"private-{uuid.uuid4().hex[:8]}"
    assert sh(box, f"echo mine > /tmp/{name} && cat /tmp/{name}")[1] == "mine\n"
    assert not os.path.exists(f"/tmp/{name}")
    other = backend.start(f"n{uuid.uuid4().hex[:12]}", internet=False, envs={})
    try:
        assert sh(other, f"ls /tmp/{name}")[0] != 0
    finally:
        other.kill()


def test_fresh_proc_minimal_dev_no_sys(box: NamespaceBox) -> None:
    """/proc shows only the sandbox's processes, /dev holds a few safe nodes, /sys is empty."""
    code, out, _ = sh(box, "ls /proc | grep -E '^[0-9]+$' | wc -l; echo $$; ls /dev; ls -A /sys | wc -l")
    assert code == 0
    lines = out.split()
    assert int(lines[0]) <= 6  # init, this bash and the pipeline (ls, grep, wc)
    assert int(lines[1]) < 10
    assert {"null", "zero", "urandom", "pts", "shm"} <= set(lines[2:-1])
    assert not {"vda", "sda", "mem", "kmsg"} & set(lines[2:-1])
    assert lines[-1] == "0"
    assert sh(box, "echo ok > /dev/null && head -c 4 /dev/urandom | wc -c")[1] == "4\n"
    pty_probe = "python3 -c 'import os, pty; print(os.ttyname(pty.openpty()[1]))'; cat <(echo via-dev-fd)"
    assert sh(box, pty_probe)[1] == "/dev/pts/0\nvia-dev-fd\n"
    assert box.home_dir == "/home/user"


def test_user_account_and_ownership(box: NamespaceBox) -> None:
    """``user`` is uid 1000 with /home/user; its files (and parents made by write) are owned by it."""
    assert (
        sh(box, "id; echo $HOME; pwd")[1]
        == "uid=1000(user) gid=1000(user) groups=1000(user)\n/home/user\n/home/user\n"
    )
    info = box.fs.write("/home/user/new/deeper/f.txt", b"x", "user")
    assert (info["owner"], info["group"]) == ("user", "user")
    assert (
        sh(box, "stat -c %U:%G /home/user/new /home/user/new/deeper /home/user/new/deeper/f.txt")[1].split()
        == ["user:user"] * 3
    )
    # the writable layer is on the sandbox's own tmpfs: seen from the host through its init
    stored = Path(f"/proc/{box.init_pid}/root/home/user/new/deeper/f.txt")
    assert stored.stat().st_uid == outside_ids(box)[1000]  # the sandbox's own id, never a host account
    assert box.fs.write("/root/r.txt", b"x", "root")["owner"] == "root"


def test_sudo_works_for_user(box: NamespaceBox) -> None:
    """Passwordless sudo takes ``user`` to the sandbox's root, as on E2B's base template; rootless it
    cannot (sudo's owner, host root, has no id in the sandbox): the stated gap."""
    if not os.path.exists("/usr/bin/sudo"):
        pytest.skip("sudo is not installed on this host (apt-get install -y sudo)")
    if rootless(box):
        assert sh(box, "sudo -n id -u")[0] != 0
    else:
        assert sh(box, "sudo -n id -u")[:2] == (0, "0\n")


def test_no_network_without_internet(box: NamespaceBox) -> None:
    """Without internet only lo exists: outside addresses are unreachable and host listeners unseen."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    listener.setblocking(False)
    port = listener.getsockname()[1]
    probe = textwrap.dedent(f"""
        import socket
        for addr in [("1.1.1.1", 53), ("127.0.0.1", {port})]:
            s = socket.socket(); s.settimeout(5)
            try:
                s.connect(addr); print("connected")
            except OSError as exc:
                print(type(exc).__name__, exc.errno)
    """)
    try:
        code, out, _ = sh(
            box,
            "ls /sys/class/net 2>/dev/null; cat /proc/net/dev | tail -n +3 | cut -d: -f1; "
            f"python3 -c '{probe}'",
        )
        with pytest.raises(BlockingIOError):
            listener.accept()  # host check: nothing reached the host's loopback
    finally:
        listener.close()
    assert code == 0
    lines = [line.strip() for line in out.splitlines()]
    assert lines[0] == "lo"
    assert lines[1] == "OSError 101"  # ENETUNREACH
    assert lines[2] == "ConnectionRefusedError 111"  # the sandbox's own, empty loopback


def test_internet_gets_its_own_network(backend: Backend) -> None:
    """With internet the sandbox has eth0 and a default route out of it, but not the host's loopback.

    The way out is read from the sandbox's routing table, not dialled: no test traffic leaves here.
    """
    assert isinstance(backend, NamespaceBackend)
    if backend.internet_network != "own":
        pytest.skip(backend.reason)
    loopback = socket.socket()
    loopback.bind(("127.0.0.1", 0))
    loopback.listen(1)
    loopback.setblocking(False)
    probe = textwrap.dedent(f"""
        import socket
        s = socket.socket(); s.settimeout(5)
        try:
            s.connect(("127.0.0.1", {loopback.getsockname()[1]})); print("connected")
        except OSError as exc:
            print(type(exc).__name__)
    """)
    online = backend.start(f"n{uuid.uuid4().hex[:12]}", internet=True, envs={})
    try:
        route = "awk 'NR > 1 && $2 == \"00000000\" {print $1}' /proc/net/route"
        code, out, _ = sh(
            online, f"tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '; {route}; python3 -c '{probe}'"
        )
        with pytest.raises(BlockingIOError):
            loopback.accept()
    finally:
        loopback.close()
        online.kill()
    assert (code, out.split()) == (0, ["lo", "eth0", "eth0", "ConnectionRefusedError"])


def test_nested_namespaces_and_user_switch_as_root(box: NamespaceBox) -> None:
    """Sandbox root can nest pid/net/mount namespaces, mount tmpfs and setpriv to other users (rootless:
    to the sandbox's other ids, user and nobody, only)."""
    other = 65534 if rootless(box) else 1001
    code, out, err = sh(
        box,
        "unshare --pid --net --mount --fork --mount-proc "
        "sh -c 'echo $$; mount -t tmpfs t /mnt && echo mounted'; "
        f"setpriv --reuid={other} --regid={other} --clear-groups id -u",
        "root",
    )
    assert (code, out) == (0, f"1\nmounted\n{other}\n"), err
    if rootless(box):
        assert sh(box, "setpriv --reuid=1001 --regid=1001 --clear-groups id -u", "root")[0] != 0


def test_host_kernel_and_processes_are_out_of_reach(box: NamespaceBox) -> None:
    """Sandbox root cannot signal host processes, set host sysctls or hostname, mount sysfs, make devices."""
    victim = subprocess.Popen(["sleep", "300"])
    try:
        host_name = socket.gethostname()
        _, out, _ = sh(
            box,
            f"kill -9 {victim.pid} 2>/dev/null; echo kill=$?; "
            "{ echo 3 > /proc/sys/vm/drop_caches; } 2>/dev/null; echo sysctl=$?; "
            "mount -t sysfs sysfs /mnt 2>/dev/null; echo sysfs=$?; "
            "mknod /tmp/disk b 254 0 2>/dev/null; echo mknod=$?; "
            "hostname sandboxed && echo hostname=$(hostname)",
            "root",
        )
        assert victim.poll() is None  # host check: still running
        assert socket.gethostname() == host_name
    finally:
        victim.kill()
        victim.wait()
    results = dict(line.split("=", 1) for line in out.split())
    assert results == {"kill": "1", "sysctl": "1", "sysfs": "32", "mknod": "1", "hostname": "sandboxed"}


def test_symlink_escape_in_file_api_is_denied(box: NamespaceBox) -> None:
    """Links planted by sandbox root to host paths resolve inside the sandbox for every file operation."""
    sh(
        box,
        "ln -s /etc/shadow /home/user/s1; ln -s ../../../../../../etc/shadow /home/user/s2; "
        "ln -s /proc/1/root/etc/shadow /home/user/s3; ln -s /etc /home/user/etc-link",
        "root",
    )
    own = box.fs.read("/etc/shadow", "root")  # the sandbox's generated one
    for name in ("s1", "s2", "s3"):
        with contextlib.suppress(OSError):
            assert box.fs.read(f"/home/user/{name}", "root") == own
    box.fs.write("/home/user/etc-link/planted", b"x", "root")
    assert not os.path.exists("/etc/planted")  # host check
    assert box.fs.read("/etc/planted", "root") == b"x"


def test_kill_confirms_every_process_gone(backend: Backend) -> None:
    """kill() returns only after the init, commands and setsid daemons are gone; files are removed."""
    victim = backend.start(f"n{uuid.uuid4().hex[:12]}", internet=False, envs={})
    assert isinstance(victim, NamespaceBox)
    marker = f"daemon-{uuid.uuid4().hex[:8]}"
    sh(victim, f"(setsid bash -c 'exec -a {marker} sleep 300' >/dev/null 2>&1 &); true", "root")
    running = victim.spawn("sleep 300", {}, "/home/user", "user", False)
    assert eventually(lambda: live_pids(marker))
    victim.kill()
    assert not live_pids(marker)
    assert gone(victim.init_pid)
    assert running.poll() is not None
    running.communicate()
    assert not victim.directory.exists()
    assert not victim.alive()


# The owner restores Python's own SIGINT handler: started from a non-interactive shell's background
# job, this process (and so the owner) inherits SIGINT ignored, and the "sigint" case would wait.
OWNER = textwrap.dedent("""
    import json, signal, sys
    signal.signal(signal.SIGINT, signal.default_int_handler)
    from pytest_e2b_env.emulator.isolation import select_backend
    backend = select_backend(force="namespaces")
    box = backend.start("orphan", internet=False, envs={})
    marker = sys.argv[2]
    daemon = f"(setsid bash -c 'exec -a {marker} sleep 300' >/dev/null 2>&1 &); true"
    proc = box.spawn(daemon, {}, "/root", "root", False)
    proc.communicate()
    info = {"init": box.init_pid, "zygote": backend._zygote.pid, "root": str(backend.root)}
    print(json.dumps(info), flush=True)
    if sys.argv[1] == "raise":
        raise RuntimeError("the owning process fails without cleaning up")
    sys.stdin.read()
""")


@pytest.mark.parametrize("how", ["sigkill", "sigterm", "sigint", "raise"])
def test_nothing_outlives_the_owning_process(backend: Backend, how: str) -> None:
    """When the backend's owner dies (a signal, or an exception without cleanup), its sandboxes die too."""
    marker = f"orphan-{uuid.uuid4().hex[:8]}"
    owner = subprocess.Popen(
        [sys.executable, "-c", OWNER, how, marker],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert owner.stdout is not None
    info = json.loads(owner.stdout.readline())
    assert live_pids(marker)
    signals = {"sigkill": signal.SIGKILL, "sigterm": signal.SIGTERM, "sigint": signal.SIGINT}
    if how in signals:
        owner.send_signal(signals[how])
    owner.wait(timeout=60)
    owner.stdout.close()
    assert owner.stdin is not None
    owner.stdin.close()
    assert eventually(lambda: not live_pids(marker))
    assert eventually(lambda: gone(info["init"]) and gone(info["zygote"]))

    def swept() -> bool:
        # Any new backend sweeps directories of dead owners; one that another process's sweep is
        # removing at that moment (it holds the lock) is gone once that sweep ends.
        select_backend(force="process").close()
        return not Path(info["root"]).exists()

    assert eventually(swept)


# Burns CPU in a process the init adopts (its shell parent exits at once), reports the CPU it had
# at the kill from inside, then kills the sandbox and prints what reached the owner's rusage.
ACCOUNTED = textwrap.dedent("""
    import json, resource, time
    from pytest_e2b_env.emulator.isolation import select_backend
    backend = select_backend(force="namespaces")
    box = backend.start("accounted", internet=False, envs={})
    burner = "(python3 -c 'while True: pass' >/dev/null 2>&1 & echo $! > /tmp/burner); true"
    box.spawn(burner, {}, "/home/user", "user", False).communicate(timeout=60)
    read = "read -r _ _ _ _ _ _ _ _ _ _ _ _ _ u s _ < /proc/$(cat /tmp/burner)/stat; echo $((u + s))"
    deadline, ticks = time.monotonic() + 60, 0
    while ticks < 50 and time.monotonic() < deadline:  # half a second of CPU at 100 ticks/s
        time.sleep(0.1)
        proc = box.spawn(read, {}, "/home/user", "user", False)
        ticks = int(proc.communicate(timeout=60)[0] or 0)
    box.kill()
    backend.close()  # waits for its zygote, the inits' parent
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(json.dumps({"burned": ticks / 100, "children": usage.ru_utime + usage.ru_stime}))
""")


def test_a_sandboxs_cpu_reaches_its_owners_rusage(backend: Backend) -> None:
    """What a sandbox's adopted processes ran on the CPU counts in its owner's getrusage.

    A dying init's namespace is emptied by the kernel, which reaps without counting; the init
    kills and reaps it first, so the run's reported CPU holds the sandboxes' work. (``backend``
    only skips where this machine has no namespaces level: the owner makes its own.)
    """
    done = subprocess.run(
        [sys.executable, "-c", ACCOUNTED], capture_output=True, text=True, timeout=180, check=True
    )
    figures = json.loads(done.stdout)
    assert figures["burned"] >= 0.5, figures
    assert figures["children"] >= figures["burned"], figures


def test_an_init_that_does_not_end_itself_is_killed(backend: Backend) -> None:
    """kill() falls back to SIGKILL when the init does not end the namespace itself (here: stopped),
    and still returns only once the init and a setsid daemon are gone."""
    stuck = backend.start(f"n{uuid.uuid4().hex[:12]}", internet=False, envs={})
    assert isinstance(stuck, NamespaceBox)
    marker = f"daemon-{uuid.uuid4().hex[:8]}"
    sh(stuck, f"(setsid bash -c 'exec -a {marker} sleep 300' >/dev/null 2>&1 &); true", "root")
    assert eventually(lambda: live_pids(marker))
    try:
        os.kill(stuck.init_pid, signal.SIGSTOP)
    except PermissionError:
        stuck.kill()
        pytest.skip("this account may not stop the sandbox's init (another uid's, rootless)")
    stuck.kill()
    assert gone(stuck.init_pid)
    assert not live_pids(marker)
    assert not stuck.directory.exists()


def test_a_sandbox_whose_init_died_reports_it(backend: Backend) -> None:
    """A sandbox whose init died is not alive(), refuses spawn (ProcessLookupError), and kill() cleans up."""
    lost = backend.start(f"n{uuid.uuid4().hex[:12]}", internet=False, envs={})
    assert isinstance(lost, NamespaceBox)
    os.kill(lost.init_pid, signal.SIGKILL)
    assert eventually(lambda: not lost.alive())
    with pytest.raises(ProcessLookupError):
        lost.spawn("true", {}, "/home/user", "user", False)
    lost.kill()
    assert not lost.directory.exists()


FORK_BOMB = textwrap.dedent("""
    import os, time
    n = 0
    try:
        while True:
            if os.fork() == 0:
                time.sleep(60)
                os._exit(0)
            n += 1
    except OSError as exc:
        print(n, exc.errno)
""")


@pytest.mark.parametrize("user", ["root", "user"])
def test_fork_bomb_is_capped_per_sandbox(backend: Backend, user: str) -> None:
    """A fork bomb, even as sandbox root, stops at the sandbox's process cap (EAGAIN), not the host's."""
    assert isinstance(backend, NamespaceBackend)
    backend.max_procs = 40
    try:
        bombed = backend.start(f"n{uuid.uuid4().hex[:12]}", internet=False, envs={})
    finally:
        backend.max_procs = MAX_PROCS
    assert isinstance(bombed, NamespaceBox)
    try:
        proc = bombed.spawn(f"python3 -c '{FORK_BOMB}'", {}, "/tmp", user, False)
        assert proc.stdout is not None
        forked, err = proc.stdout.readline().split()
        assert err == b"11"  # EAGAIN
        assert 10 < int(forked) < 40
        ids = set(outside_ids(bombed).values())
        in_box = [p for p in os.listdir("/proc") if p.isdigit() and _uid_or_none(int(p)) in ids]
        assert len(in_box) <= 40  # host check
    finally:
        bombed.kill()
    proc.communicate()


def _uid_or_none(pid: int) -> int | None:
    try:
        return host_uid(pid)
    except (OSError, AssertionError):
        return None


def test_kill_everything_inside_spares_the_sandbox(box: NamespaceBox) -> None:
    """`kill -9 -1` as sandbox root ends its own processes but not the init: the sandbox stays usable."""
    marker = f"victim-{uuid.uuid4().hex[:8]}"
    sh(box, f"(setsid bash -c 'exec -a {marker} sleep 300' >/dev/null 2>&1 &); true", "root")
    assert eventually(lambda: live_pids(marker))
    sh(box, "kill -9 -1", "root")
    assert eventually(lambda: not live_pids(marker))
    assert box.alive()
    assert sh(box, "echo still here") == (0, "still here\n", "")


# Python 3.12+ warns about fork() with threads running; this test forks on purpose.
@pytest.mark.filterwarnings("ignore:.*multi-threaded.*:DeprecationWarning")
def test_a_forked_copy_of_the_owner_does_not_keep_sandboxes_alive(backend: Backend) -> None:
    """A Python fork of the owning process drops the lifeline, so only the owner keeps sandboxes alive."""
    assert isinstance(backend, NamespaceBackend)
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        os.close(read_end)
        try:
            os.fstat(backend._life_w)
            os.write(write_end, b"held")
        except OSError:
            os.write(write_end, b"dropped")
        os._exit(0)
    os.close(write_end)
    answer = os.read(read_end, 16)
    os.close(read_end)
    os.waitpid(pid, 0)
    assert answer == b"dropped"


def test_checkout_below_a_system_place_is_hidden(monkeypatch: pytest.MonkeyPatch) -> None:
    """An emulator started from a checkout under a visible system place (/srv/x) still hides that checkout."""
    if not os.access("/srv", os.W_OK):
        pytest.skip("makes a checkout in the host's /srv, which this account cannot write")
    project = Path("/srv") / f"e2b-checkout-{uuid.uuid4().hex[:8]}"
    project.mkdir()
    (project / "expected.json").write_text('{"answer": 42}')
    monkeypatch.chdir(project)
    try:
        owner = select_backend(root=BASE_DIR / f"{os.getpid()}-srv", force="namespaces")
    except EmulatorError as exc:
        shutil.rmtree(project)
        pytest.skip(str(exc))
    try:
        box = owner.start(f"n{uuid.uuid4().hex[:12]}", internet=False, envs={})
        code, out, _ = sh(box, f"cat {project}/expected.json; ls /srv", "root")
        assert code == 0
        assert "42" not in out
        assert project.name not in out
    finally:
        owner.close()
        shutil.rmtree(project)


def test_no_sandbox_id_shows_where_other_accounts_can_read(backend: Backend) -> None:
    """A sandbox's id appears in none of what any local account may read of its processes: mount
    table, cgroups, command lines (the id is the key to its doors, with the token)."""
    sandbox_id = f"secret{uuid.uuid4().hex[:12]}"
    box = backend.start(sandbox_id, internet=True, envs={})
    assert isinstance(box, NamespaceBox)
    try:
        proc = box.spawn("sleep 30", {}, "/tmp", "user", False)
        pids = [box.init_pid, proc.pid, *[int(p) for p in live_pids("slirp4netns")]]
        seen = ""
        for pid in pids:
            for name in ("mountinfo", "cgroup", "cmdline", "comm"):
                with contextlib.suppress(OSError):
                    seen += Path(f"/proc/{pid}/{name}").read_text(errors="replace")
        assert seen
        assert sandbox_id not in seen
        box.signal(proc, signal.SIGKILL)
        proc.communicate(timeout=30)
    finally:
        box.kill()
