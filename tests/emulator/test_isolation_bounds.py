"""Bounds across sandboxes and emulators: owner locks, aggregate caps, the memory watchdog, cgroup v2."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_e2b_env.emulator.isolation import BASE_DIR
from pytest_e2b_env.emulator.isolation.ids import Ids
from pytest_e2b_env.emulator.isolation.owners import Owner, dead, new_name
from pytest_e2b_env.emulator.isolation.quota import (
    CgroupsV2,
    Limits,
    _own_cgroup,
    aggregate_memory_mb,
    aggregate_procs,
)
from pytest_e2b_env.emulator.isolation.watchdog import Watchdog, Watched

PACKAGE_PARENT = str(Path(__file__).resolve().parents[2])


def _host_root() -> bool:
    return os.geteuid() == 0 and not Ids().nested


def _new_root() -> Path:
    """A backend directory as select_backend makes one."""
    BASE_DIR.mkdir(parents=True, exist_ok=True)
    root = BASE_DIR / new_name()
    root.mkdir(mode=0o711)
    return root


def _end(*procs: subprocess.Popen[bytes]) -> None:
    """Kill each process and collect it (its pipes closed)."""
    for proc in procs:
        proc.kill()
        proc.communicate()


# ---------------------------------------------------------------------- owners
def test_an_owner_is_dead_exactly_when_its_lock_is_free(tmp_path: Path) -> None:
    """A held lock means alive, in this process or another; a released or orphaned one means dead."""
    owner = Owner(tmp_path / "a-1")
    assert not dead(tmp_path, "a-1")
    owner.release()
    assert not (tmp_path / "a-1.lock").exists()
    assert not dead(tmp_path, "a-1")  # no lock at all: unknown here, never swept
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from pathlib import Path;"
            " from pytest_e2b_env.emulator.isolation.owners import Owner;"
            f" o = Owner(Path({str(tmp_path / 'b-2')!r})); print('held', flush=True); sys.stdin.read()",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": PACKAGE_PARENT},
    )
    assert holder.stdout is not None
    assert holder.stdout.readline() == b"held\n"
    assert not dead(tmp_path, "b-2")
    _end(holder)  # dies without releasing: the kernel drops the lock, the file stays
    assert (tmp_path / "b-2.lock").exists()
    assert dead(tmp_path, "b-2")


def test_an_owner_outlasts_a_sweep_that_held_its_fresh_lock(tmp_path: Path) -> None:
    """A sweep that took a new emulator's lock file between its creation and its lock removes the
    directory and the file; the emulator then locks a file of its own and has its directory."""
    import fcntl
    import threading

    root = tmp_path / "c-3"
    root.mkdir()
    lock = tmp_path / "c-3.lock"
    sweeper = os.open(lock, os.O_RDWR | os.O_CREAT)
    fcntl.flock(sweeper, fcntl.LOCK_EX)  # the sweep holds it: the owner waits
    got: list[Owner] = []
    taking = threading.Thread(target=lambda: got.append(Owner(root)))
    taking.start()
    taking.join(0.3)
    assert taking.is_alive()
    root.rmdir()  # what the sweep does with the lock held: the tree, then the file
    lock.unlink()
    os.close(sweeper)
    taking.join(10)
    (owner,) = got
    assert root.is_dir()
    assert not dead(tmp_path, "c-3")  # the file at the path now is the one it holds
    owner.release()


def test_a_dead_owners_lock_stays_until_its_groups_are_gone(tmp_path: Path) -> None:
    """A sweep that could not remove a dead emulator's cgroups (a v1 rmdir refused for a moment)
    keeps its lock: the next sweep still knows them as a dead emulator's and removes them."""
    from pytest_e2b_env.emulator.isolation.owners import sweep

    owner = Owner(tmp_path / "d-4")
    assert owner._fd is not None
    os.close(owner._fd)  # as at its death: the kernel drops the lock, the file stays
    (tmp_path / "d-4" / "files").mkdir()
    left = {"d-4"}
    sweep(tmp_path, also=lambda name: name not in left)
    assert not (tmp_path / "d-4").exists()
    assert dead(tmp_path, "d-4")  # still claimed as dead: its groups are swept later
    left.clear()
    sweep(tmp_path, also=lambda name: name not in left)
    assert not (tmp_path / "d-4.lock").exists()


def test_only_day_old_unclaimed_groups_are_swept(tmp_path: Path) -> None:
    """Groups no lock claims go once a day old; claimed ones and young ones stay."""
    from pytest_e2b_env.emulator.isolation import quota

    old = quota.time.time() - quota.STALE_AGE - 60
    for name in ("old-1", "young-2", "claimed-3"):
        (tmp_path / f"{quota.TAG}{name}" / "sandbox").mkdir(parents=True)
        if name != "young-2":
            os.utime(tmp_path / f"{quota.TAG}{name}", (old, old))
    (tmp_path / "other").mkdir()
    os.utime(tmp_path / "other", (old, old))
    quota.sweep_unclaimed([tmp_path], lambda name: name == "claimed-3")
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "other",
        f"{quota.TAG}claimed-3",
        f"{quota.TAG}young-2",
    ]


def test_removing_a_dead_emulators_groups_says_whether_any_is_left(tmp_path: Path) -> None:
    """True once every group of the name is gone (or there was none); False while one refuses."""
    from pytest_e2b_env.emulator.isolation import quota

    parents = [tmp_path / "memory", tmp_path / "cpu"]
    for parent in parents:
        (parent / f"{quota.TAG}e-5" / "sandbox").mkdir(parents=True)
    busy = parents[1] / f"{quota.TAG}e-5" / "sandbox" / "tasks"
    busy.write_text("4242")  # a plain directory with a file refuses rmdir, as a busy group does
    assert not quota.remove_groups(parents, "e-5")
    assert not (parents[0] / f"{quota.TAG}e-5").exists()
    busy.unlink()
    assert quota.remove_groups(parents, "e-5")
    assert quota.remove_groups(parents, "never-made")


def test_names_are_unique_per_emulator() -> None:
    """Two names taken by one process differ (a pid alone repeats across pid namespaces)."""
    assert new_name() != new_name()
    assert new_name().startswith(f"{os.getpid()}-")


# ---------------------------------------------------------------------- aggregate caps
def test_aggregate_caps_stay_below_what_the_host_has_free(tmp_path: Path) -> None:
    """The process cap is half the free pid space (bounded), the memory cap 3/4 of available memory."""
    proc = tmp_path / "proc"
    (proc / "sys" / "kernel").mkdir(parents=True)
    (proc / "sys" / "kernel" / "pid_max").write_text("32768\n")
    (proc / "sys" / "kernel" / "threads-max").write_text("100000\n")
    for pid in range(1, 769):
        (proc / str(pid)).mkdir()
    assert aggregate_procs(proc) == (32768 - 768) // 2
    (proc / "sys" / "kernel" / "pid_max").write_text("4194304\n")
    assert aggregate_procs(proc) == 16384  # never more than this, however large pid_max is
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal: 24000000 kB\nMemAvailable: 8388608 kB\n")
    assert aggregate_memory_mb(meminfo) == 6144


FORK_BOMB = textwrap.dedent("""
    import os, sys, time
    n = 0
    try:
        while n < 5000:
            if os.fork() == 0:
                time.sleep(60)
                os._exit(0)
            n += 1
    except OSError as exc:
        print(n, exc.errno, flush=True)
    time.sleep(60)
""")


@pytest.fixture
def capped() -> Iterator[object]:
    """A namespaces backend: 40 processes per sandbox, 60 for all together (host root, v1 pids)."""
    from pytest_e2b_env.emulator.isolation.namespaces import NamespaceBackend

    if not _host_root():
        pytest.skip("the pids cgroup of this test needs host root")
    parent, why = _own_cgroup("pids")
    if parent is None:
        pytest.skip(why)
    backend = NamespaceBackend(_new_root(), "test", aggregate_procs=60)
    backend.max_procs = 40
    yield backend
    backend.close()


@pytest.mark.full
def test_fork_bombs_in_two_sandboxes_stop_at_the_aggregate_cap(capped: object) -> None:
    """Each bomb stops at its sandbox's cap, and both together at the emulator's: the host keeps forking."""
    from pytest_e2b_env.emulator.isolation.namespaces import NamespaceBackend

    assert isinstance(capped, NamespaceBackend)
    assert "60 processes for all sandboxes together (cgroup v1 pids)" in capped.describe_quotas()
    boxes = [capped.start(f"n{uuid.uuid4().hex[:12]}", internet=False) for _ in range(2)]
    procs = []
    try:
        counts = []
        for box in boxes:
            proc = box.spawn(f"python3 -c '{FORK_BOMB}'", {}, "/tmp", "root", False)
            procs.append(proc)
            assert proc.stdout is not None
            forked, err = proc.stdout.readline().split()
            assert err == b"11"  # EAGAIN
            counts.append(int(forked))
        assert counts[0] < 40
        assert sum(counts) < 60  # the second sandbox met the aggregate before its own cap
        assert subprocess.run(["true"], check=False).returncode == 0  # the host still forks
    finally:
        for box in boxes:
            box.kill()
        for proc in procs:
            proc.communicate()


def test_a_cgroup_root_removed_under_a_running_emulator_is_made_again() -> None:
    """Another host's sweep removing this emulator's (empty) memory group does not stop its next sandbox."""
    from pytest_e2b_env.emulator.isolation.namespaces import NamespaceBackend

    if not _host_root() or _own_cgroup("memory")[0] is None:
        pytest.skip("needs host root and the cgroup v1 memory controller")
    backend = NamespaceBackend(_new_root(), "test")
    try:
        parent, _ = _own_cgroup("memory")
        assert parent is not None
        group = parent / f"pytest-e2b-env-{backend.root.name}"
        assert group.is_dir()
        group.rmdir()  # what a sweep by another emulator did before owners held locks
        box = backend.start(f"n{uuid.uuid4().hex[:12]}", internet=False)
        try:
            assert group.is_dir()
            assert (
                int((group / "memory.limit_in_bytes").read_text()) == backend.limits.aggregate_memory_mb << 20
            )
            proc = box.spawn("echo ok", {}, "/tmp", "user", False)
            assert proc.communicate(timeout=60)[0] == b"ok\n"
        finally:
            box.kill()
    finally:
        backend.close()


EMULATOR_IN_PIDNS = [
    "unshare",
    "--pid",
    "--fork",
    "--mount-proc",
    "--kill-child",
    sys.executable,
    "-m",
    "pytest_e2b_env.cli",
    "emulator",
    "--port",
    "0",
]


def _emulator_in_its_own_pid_namespace() -> tuple[subprocess.Popen[bytes], dict[str, str]]:
    proc = subprocess.Popen(
        EMULATOR_IN_PIDNS,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "PYTHONPATH": PACKAGE_PARENT},
        start_new_session=True,  # unshare passes no signal on: the emulator gets them as the group's
    )
    assert proc.stdout is not None
    values: dict[str, str] = {}
    while "E2B_API_KEY" not in values or "isolation" not in values:
        line = proc.stdout.readline().decode()
        assert line, "the emulator exited before announcing itself"
        if line.startswith("# isolation="):
            values["isolation"] = line
        elif "=" in line:
            key, _, value = line.strip().partition("=")
            values[key] = value
    return proc, values


@pytest.mark.full
def test_emulators_in_other_pid_namespaces_keep_their_sandboxes_and_cgroups() -> None:
    """Two emulators, each in a pid namespace of its own, keep creating sandboxes while a third backend,
    in yet another pid namespace, sweeps at its start: it takes nothing of theirs."""
    if not _host_root() or shutil.which("unshare") is None:
        pytest.skip("needs host root and unshare to make pid namespaces")
    from e2b import Sandbox

    emulators = [_emulator_in_its_own_pid_namespace() for _ in range(2)]
    try:
        if "isolation=namespaces" not in emulators[0][1]["isolation"]:
            pytest.skip(emulators[0][1]["isolation"])
        opts = [
            {"api_key": v["E2B_API_KEY"], "api_url": v["E2B_API_URL"], "sandbox_url": v["E2B_SANDBOX_URL"]}
            for _, v in emulators
        ]
        first = [Sandbox.create(timeout=120, **o) for o in opts]
        sweeper = subprocess.run(
            [
                "unshare",
                "--pid",
                "--fork",
                "--mount-proc",
                sys.executable,
                "-c",
                "from pytest_e2b_env.emulator.isolation import select_backend;"
                " select_backend(force='namespaces').close()",
            ],
            env={**os.environ, "PYTHONPATH": PACKAGE_PARENT},
            capture_output=True,
            timeout=120,
            check=False,
        )
        assert sweeper.returncode == 0, sweeper.stderr.decode()[-2000:]
        for sandbox, o in zip(first, opts, strict=True):
            assert sandbox.commands.run("echo still").stdout == "still\n"
            fresh = Sandbox.create(timeout=120, **o)  # its cgroups are all still there
            assert fresh.commands.run("echo new").stdout == "new\n"
            fresh.kill()
            sandbox.kill()
    finally:
        for proc, _ in emulators:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.communicate(timeout=60)


# ---------------------------------------------------------------------- memory watchdog
HOG = (
    "import time; x = bytearray({size}); x[::4096] = b'x' * len(x[::4096]);"
    " print('full', flush=True); time.sleep(60)"
)


def test_the_watchdog_kills_the_largest_process_over_its_quota() -> None:
    """Past the sandbox's quota the watchdog SIGKILLs its largest process (exit -9), not the smaller ones."""
    parent = subprocess.Popen(["sleep", "120"])
    hog = subprocess.Popen([sys.executable, "-c", HOG.format(size=96 << 20)], stdout=subprocess.PIPE)
    small = subprocess.Popen([sys.executable, "-c", HOG.format(size=1 << 20)], stdout=subprocess.PIPE)
    try:
        for proc in (hog, small):
            assert proc.stdout is not None
            assert proc.stdout.readline() == b"full\n"
        box = Watched("box", parent.pid, (hog.pid, small.pid), files_root=None)
        dog = Watchdog(quota_bytes=64 << 20, aggregate_bytes=1 << 40, boxes=lambda: [box])
        assert dog.check() == [hog.pid]
        assert hog.wait(timeout=30) == -9
        assert small.poll() is None
        assert dog.check() == []  # under the quota now
        assert dog.kills == {"quota": 1, "aggregate": 0}
    finally:
        _end(parent, hog, small)


def test_the_watchdog_kills_in_the_largest_sandbox_when_all_pass_the_aggregate() -> None:
    """Each sandbox under its quota, all together over the aggregate: the largest one loses its largest."""
    parent = subprocess.Popen(["sleep", "120"])
    procs = [
        subprocess.Popen([sys.executable, "-c", HOG.format(size=s << 20)], stdout=subprocess.PIPE)
        for s in (48, 24)
    ]
    try:
        for proc in procs:
            assert proc.stdout is not None
            assert proc.stdout.readline() == b"full\n"
        boxes = [
            Watched("big", parent.pid, (procs[0].pid,), None),
            Watched("small", parent.pid, (procs[1].pid,), None),
        ]
        dog = Watchdog(quota_bytes=1 << 30, aggregate_bytes=60 << 20, boxes=lambda: boxes)
        assert dog.check() == [procs[0].pid]
        assert dog.kills == {"quota": 0, "aggregate": 1}
    finally:
        _end(parent, *procs)


def test_the_watchdog_reads_a_bounded_number_of_proc_files() -> None:
    """A tree larger than the pass's read budget is measured in part, never read whole in one pass."""
    parent = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import subprocess, time; [subprocess.Popen(['sleep', '60']) for _ in range(30)];"
            " print('up', flush=True); time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
        start_new_session=True,  # its sleepers hold the pipe too: the group is killed, not the parent alone
    )
    try:
        assert parent.stdout is not None
        assert parent.stdout.readline() == b"up\n"
        from pytest_e2b_env.emulator.isolation.watchdog import measure

        whole = measure(Watched("b", parent.pid, (), None), [10_000])
        part = measure(Watched("b", parent.pid, (), None), [10])
        assert len(whole.processes) == 30
        assert len(part.processes) < 10
    finally:
        os.killpg(parent.pid, signal.SIGKILL)
        _end(parent)


# ---------------------------------------------------------------------- cgroup v2
V2_PROBE = textwrap.dedent("""
    import json, os, subprocess, sys, time, uuid
    from pathlib import Path
    from pytest_e2b_env.emulator.isolation.quota import CgroupsV2, Limits, _make_room, _remove_tree
    mount = Path(sys.argv[1])
    subprocess.run(["mount", "-t", "cgroup2", "none", str(mount)], check=True)
    # Every cgroup2 mount shows the host's one hierarchy: names of this run only, all removed at the end.
    token = uuid.uuid4().hex[:8]
    job = mount / f"job-{token}"
    dead, live = mount / f"pytest-e2b-env-2-{token}", mount / f"pytest-e2b-env-3-{token}"
    limits = Limits(memory_mb=64, cpus=1, aggregate_memory_mb=128, aggregate_procs=100)
    out = {}
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        # a delegated group that still holds a process: its processes move to a leaf first
        job.mkdir()
        (job / "cgroup.procs").write_text(str(sleeper.pid))
        _make_room(job)
        out["job"] = (job / "cgroup.procs").read_text().split()
        leaf = job / "pytest-e2b-env-processes"
        out["leaf"] = (leaf / "cgroup.procs").read_text().split() == [str(sleeper.pid)]
        dead.mkdir()  # groups of a dead and of a live emulator
        live.mkdir()
        groups = CgroupsV2.open_v2(
            f"1-{token}", limits, lambda name: name == f"2-{token}", mount=mount, own=f"/job-{token}"
        )
        out["opened"] = isinstance(groups, CgroupsV2)
        out["swept"] = sorted(p.name.split("-")[3] for p in mount.glob(f"pytest-e2b-env-*-{token}"))
        paths = groups.create("sbx")
        prefix = groups.command_prefix(paths)
        child = subprocess.Popen([*prefix, "sleep", "60"])
        time.sleep(0.5)
        out["member"] = (paths[0] / "cgroup.procs").read_text().split() == [str(child.pid)]
        child.kill(); child.wait()
        groups.remove(paths)
        out["removed"] = not paths[0].exists()
        groups.close()
        out["closed"] = not groups.root.exists()
    finally:
        sleeper.kill(); sleeper.wait()
        for group in (job, dead, live, mount / f"pytest-e2b-env-1-{token}"):
            _remove_tree(group)
        out["left"] = sorted(p.name for p in mount.iterdir() if p.is_dir() and token in p.name)
    print(json.dumps(out))
""")


@pytest.mark.full
def test_cgroup_v2_subtree_in_a_private_mount(tmp_path: Path) -> None:
    """On a cgroup2 hierarchy mounted privately: a delegated group's processes move to a leaf, the
    emulator's group and a sandbox's are made below it, a command joins its sandbox's group by itself
    before it runs, and both groups go away. (This host binds every controller to cgroup v1, so
    memory.max, pids.max and cpu.max are not written here: that part runs only on v2 hosts.)"""
    if not _host_root() or shutil.which("unshare") is None:
        pytest.skip("mounting a cgroup2 hierarchy needs host root")
    mount = tmp_path / "cg2"
    mount.mkdir()
    done = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", sys.executable, "-c", V2_PROBE, str(mount)],
        env={**os.environ, "PYTHONPATH": PACKAGE_PARENT},
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    out = json.loads(done.stdout)
    assert out == {
        "job": [],
        "leaf": True,
        "opened": True,
        "swept": ["1", "3"],  # the dead emulator's group went, the live one's stayed
        "member": True,
        "removed": True,
        "closed": True,
        "left": [],
    }


def test_cgroup_v2_writes_the_limits_of_the_controllers_it_has(tmp_path: Path) -> None:
    """With memory, pids and cpu available (a fake hierarchy), the emulator's group gets the aggregates and a
    sandbox's group its own quota: the files the kernel reads, with the values it expects."""
    root = tmp_path / "fake"
    (root / "job").mkdir(parents=True)
    for path in (root, root / "job"):
        (path / "cgroup.controllers").write_text("cpu memory pids io\n")
        (path / "cgroup.subtree_control").write_text("cpu memory pids\n" if path == root else "")
        (path / "cgroup.procs").write_text("")
    limits = Limits(memory_mb=1536, cpus=2, aggregate_memory_mb=12000, aggregate_procs=16000)
    (root / "pytest-e2b-env-7-feed").mkdir()  # a real hierarchy gives a new group these files itself
    (root / "pytest-e2b-env-7-feed" / "cgroup.subtree_control").write_text("")
    groups = CgroupsV2.open_v2("7-feed", limits, lambda name: False, mount=root, own="/job")
    assert isinstance(groups, CgroupsV2)
    assert groups.root == root / "pytest-e2b-env-7-feed"  # below the parent, which root may write
    assert (groups.root / "memory.max").read_text() == str(12000 << 20)
    assert (groups.root / "pids.max").read_text() == "16000"
    assert (groups.root / "cgroup.subtree_control").read_text() == "+cpu +memory +pids"
    (path,) = groups.create("sbx")
    assert (path / "memory.max").read_text() == str(1536 << 20)
    assert (path / "cpu.max").read_text() == "200000 100000"
    assert not (path / "pids.max").exists()  # each sandbox's own cap is RLIMIT_NPROC
