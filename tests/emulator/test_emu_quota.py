"""Per-sandbox disk and memory quotas: a sandbox cannot fill the host's disk or memory."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_e2b_env.emulator import Emulator

pytestmark = pytest.mark.namespaces

MEMORY_MB, DISK_MB = 256, 32


@pytest.fixture(scope="module")
def small() -> Iterator[Emulator]:
    """An emulator whose sandboxes get 32 MiB of disk and 256 MiB of memory besides."""
    with Emulator(limits={"sandbox_memory_mb": MEMORY_MB, "sandbox_disk_mb": DISK_MB}) as emu:
        if emu.isolation != "namespaces":
            pytest.skip(f"emulator isolation is {emu.isolation!r}: {emu.isolation_reason}")
        yield emu


@pytest.fixture
def sandbox(small: Emulator) -> Iterator[object]:
    """A sandbox of the small emulator, killed after the test."""
    from e2b import Sandbox

    sbx = Sandbox.create(timeout=120, **small.sdk_opts())
    yield sbx
    sbx.kill()


def _host_files_over(root: Path, size: int) -> list[Path]:
    big = []
    for path in root.rglob("*"):
        try:
            if path.is_file() and not path.is_symlink() and path.stat().st_size > size:
                big.append(path)
        except OSError:
            continue
    return big


@pytest.mark.full
def test_writes_past_the_disk_quota_fail_and_never_reach_the_host_disk(
    small: Emulator, sandbox: object
) -> None:
    """A command writing 40 MiB into a 32 MiB sandbox gets ENOSPC; the host's /var/tmp holds none of it."""
    from e2b import NotEnoughSpaceException, Sandbox

    assert isinstance(sandbox, Sandbox)
    if "no disk quota" in small.isolation_reason:
        pytest.skip(small.isolation_reason)
    result = sandbox.commands.run(
        "head -c 40M /dev/zero > /tmp/big; echo rc=$?; df -m / | tail -1", timeout=60
    )
    lines = result.stdout.splitlines()
    assert lines[0] == "rc=1"
    assert "No space left on device" in result.stderr
    assert int(lines[1].split()[1]) == DISK_MB  # df shows the quota as the disk's size
    assert small.pid is not None
    (root,) = [p for p in Path("/var/tmp/pytest-e2b-env").glob(f"{small.pid}-*") if p.is_dir()]
    assert _host_files_over(root, 1 << 20) == []
    with pytest.raises(NotEnoughSpaceException):  # the files API hits the same quota
        sandbox.files.write("/home/user/big.bin", b"x" * (40 << 20))
    assert (
        sandbox.commands.run("rm /tmp/big && echo ok > /home/user/small && cat /home/user/small").stdout
        == "ok\n"
    )


def test_memory_past_the_quota_kills_the_hog_not_the_sandbox(small: Emulator, sandbox: object) -> None:
    """A process holding 512 MiB in a sandbox limited to 288 MiB is killed (by its memory cgroup, or
    the emulator's watchdog where there is none); the sandbox keeps working. It holds them: the
    watchdog samples every 0.25 s, and a loaded host let a hog that exited at once go unseen."""
    from e2b import Sandbox

    assert isinstance(sandbox, Sandbox)
    if "no memory quota" in small.isolation_reason:
        pytest.skip(small.isolation_reason)
    result = sandbox.commands.run(
        "python3 -c 'import time; b = bytearray(512 << 20); time.sleep(30); print(\"held\")'; echo rc=$?",
        timeout=60,
    )
    assert result.stdout.split() == ["rc=137"]  # SIGKILL: its cgroup's OOM killer, or the watchdog
    assert sandbox.commands.run("echo alive").stdout == "alive\n"


def test_the_isolation_level_states_the_quotas(small: Emulator) -> None:
    """The level's reason names the disk and memory quotas (or why one is missing)."""
    reason = small.isolation_reason
    assert f"disk quota {DISK_MB} MiB" in reason or "no disk quota" in reason
    assert f"memory quota {MEMORY_MB + DISK_MB} MiB" in reason or "no memory quota" in reason
    assert "2 CPUs each, equal shares" in reason or "no CPU quota" in reason
    assert os.path.isdir("/var/tmp/pytest-e2b-env")


@pytest.mark.parametrize("controller", ["memory", "cpu"])
def test_cgroups_of_a_killed_emulator_are_swept(small: Emulator, controller: str) -> None:
    """After an emulator dies by SIGKILL its sandboxes' cgroups are removed by the next backend."""
    import signal

    from e2b import Sandbox
    from emu_helpers import eventually

    from pytest_e2b_env.emulator.isolation import BASE_DIR, select_backend
    from pytest_e2b_env.emulator.isolation.owners import dead
    from pytest_e2b_env.emulator.isolation.quota import _own_cgroup, sweep_groups

    parent, why = _own_cgroup(controller)
    if parent is None or f"(cgroup v1 {controller})" not in small.isolation_reason:
        pytest.skip(why or small.isolation_reason)
    # A dead emulator's group whose pid the new one reuses may still wait for its sweep: the new
    # one's group is the one that was not there before.
    before = set(parent.glob("pytest-e2b-env-*"))
    with Emulator() as doomed:
        assert doomed.pid is not None
        # the emulator's name: pid and a token
        (mine,) = set(parent.glob(f"pytest-e2b-env-{doomed.pid}-*")) - before
        Sandbox.create(timeout=120, **doomed.sdk_opts())
        assert len([p for p in mine.iterdir() if p.is_dir()]) == 1
        os.kill(doomed.pid, signal.SIGKILL)

        def emptied() -> bool:
            # Another emulator of the suite starting meanwhile may sweep the dead group first.
            try:
                return all(not (p / "tasks").read_text() for p in mine.iterdir() if p.is_dir())
            except FileNotFoundError:
                return True

        eventually(emptied, 20)
    select_backend(root=BASE_DIR / f"{os.getpid()}-sweep", force="namespaces").close()

    # On a loaded host a v1 group can refuse rmdir (EBUSY) for a moment after its last task left;
    # the sweep then leaves it to the next start, which is what these further sweeps stand for.
    def swept() -> bool:
        sweep_groups(parent, lambda name: dead(BASE_DIR, name))
        return not mine.exists()

    eventually(swept, 20, f"the sweep of {mine}")


HOGS = 12
SHARE = """
import os, resource, sys, time
n, seconds = int(sys.argv[1]), float(sys.argv[2])
end = time.monotonic() + seconds
pids = []
for _ in range(n):
    pid = os.fork()
    if pid == 0:
        os.setsid()  # a session each, as hostile programs do: the kernel's autogroups do not help
        while time.monotonic() < end:
            pass
        os._exit(0)
    pids.append(pid)
for pid in pids:
    os.waitpid(pid, 0)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_utime)
"""


@pytest.mark.full
def test_a_sandbox_full_of_busy_processes_takes_a_share_not_the_host(small: Emulator) -> None:
    """12 busy processes in one sandbox and 1 in another: the lone one gets about as much CPU as all 12.

    E2B gives every sandbox CPUs of its own. Without a cgroup per sandbox the lone process would get
    1/13 of the CPU here, and another sandbox's fork bomb would push correct programs past their
    deadlines. Only CPU times of one run are compared (no wall-clock assertion).
    """
    from e2b import Sandbox

    if "no CPU quota" in small.isolation_reason:
        pytest.skip(small.isolation_reason)
    crowd = Sandbox.create(timeout=120, **small.sdk_opts())
    lone = Sandbox.create(timeout=120, **small.sdk_opts())
    try:
        for sbx in (crowd, lone):
            sbx.files.write("/tmp/share.py", SHARE)
        many = crowd.commands.run(f"python3 /tmp/share.py {HOGS} 3", background=True, timeout=60)
        one = lone.commands.run("python3 /tmp/share.py 1 3", background=True, timeout=60)
        crowd_cpu, lone_cpu = float(many.wait().stdout), float(one.wait().stdout)
    finally:
        crowd.kill()
        lone.kill()
    assert lone_cpu > 0.05
    assert lone_cpu >= crowd_cpu / 4, (lone_cpu, crowd_cpu)
    print(f"lone {lone_cpu:.2f} s CPU, crowd {crowd_cpu:.2f} s CPU")
