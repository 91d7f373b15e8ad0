"""Hostile sandbox files (devices, FIFOs, huge and deep trees) through the real SDK stay bounded."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from e2b import FileNotFoundException, InvalidArgumentException, SandboxException
from emu_helpers import eventually

from pytest_e2b_env.emulator import Emulator

LIMIT = 1 << 20  # file_bytes of the small-limits emulator
DEEP = "python3 -c \"import os\nfor _ in range({n}): os.mkdir('d'); os.chdir('d')\""


def _deep_tree(sbx: Any, where: str, levels: int) -> None:
    sbx.commands.run(f"mkdir -p {where} && cd {where} && " + DEEP.format(n=levels), timeout=120)


def test_read_of_a_dev_zero_symlink_is_refused(small_sbx: Any) -> None:
    """files.read of a symlink to /dev/zero raises InvalidArgumentException naming the device, at once."""
    small_sbx.commands.run("ln -s /dev/zero zero")
    with pytest.raises(InvalidArgumentException, match="character device, not a regular file"):
        small_sbx.files.read("zero", request_timeout=60)
    small_sbx.files.write("after.txt", "still serving")
    assert small_sbx.files.read("after.txt", request_timeout=60) == "still serving"


def test_read_above_the_file_cap_is_refused(small_sbx: Any) -> None:
    """A file over file_bytes raises InvalidArgumentException naming the limit; one at the cap reads."""
    small_sbx.commands.run(f"truncate -s {LIMIT + 1} big && truncate -s {LIMIT} fits")
    with pytest.raises(InvalidArgumentException, match=f"above the emulator's limit of {LIMIT} bytes"):
        small_sbx.files.read("big", format="bytes", request_timeout=60)
    assert len(small_sbx.files.read("fits", format="bytes", request_timeout=60)) == LIMIT


def test_fifo_read_is_refused_and_replies_stay_in_step(small_sbx: Any) -> None:
    """Reading a FIFO is refused without blocking; later reads get their own answers (no shifted replies)."""
    small_sbx.commands.run("mkfifo /home/user/pipe")
    small_sbx.files.write("/root/secret", "root only", user="root")
    small_sbx.commands.run("chmod 600 /root/secret", user="root")
    small_sbx.files.write("mine.txt", "mine")
    with pytest.raises(InvalidArgumentException, match="is a FIFO"):
        small_sbx.files.read("/home/user/pipe", user="root", request_timeout=60)
    assert small_sbx.files.read("mine.txt", request_timeout=60) == "mine"
    with pytest.raises(SandboxException) as denied:
        small_sbx.files.read("/root/secret", user="user", request_timeout=60)
    assert "root only" not in str(denied.value)
    assert small_sbx.files.read("/root/secret", user="root", request_timeout=60) == "root only"


def test_write_to_a_fifo_is_refused(small_sbx: Any) -> None:
    """files.write onto a FIFO raises InvalidArgumentException instead of waiting for a reader."""
    small_sbx.commands.run("mkfifo pipe")
    with pytest.raises(InvalidArgumentException, match="not a regular file"):
        small_sbx.files.write("pipe", "x", request_timeout=60)
    assert small_sbx.commands.run("test -p pipe && echo fifo").stdout == "fifo\n"


@pytest.mark.namespaces
def test_fifo_as_etc_passwd_does_not_block_listing(small_emu: Emulator, small_sbx: Any) -> None:
    """A FIFO planted at /etc/passwd by sandbox root leaves listings working, owners shown by id."""
    if small_emu.isolation != "namespaces":
        pytest.skip(f"emulator isolation is {small_emu.isolation!r}: {small_emu.isolation_reason}")
    small_sbx.files.write("f.txt", "x")
    small_sbx.commands.run("rm /etc/passwd && mkfifo /etc/passwd", user="root")
    entries = small_sbx.files.list("/home/user", request_timeout=60)
    assert [(e.name, e.owner) for e in entries if e.name == "f.txt"] == [("f.txt", "1000")]


def test_list_depth_above_the_cap_is_refused_on_a_deep_tree(small_sbx: Any) -> None:
    """files.list(depth=3000) on a 1,100-level tree is INVALID_ARGUMENT; the sandbox keeps serving."""
    _deep_tree(small_sbx, "deep", 1100)
    with pytest.raises(InvalidArgumentException, match="depth=3000 is above the emulator's limit of 256"):
        small_sbx.files.list("deep", depth=3000, request_timeout=60)
    listed = small_sbx.files.list("deep", depth=200, request_timeout=60)
    assert len(listed) == 200
    assert small_sbx.commands.run("echo alive").stdout == "alive\n"


def test_list_over_the_entry_cap_is_refused(small_sbx: Any) -> None:
    """A listing of more than list_entries entries is INVALID_ARGUMENT naming the cap."""
    small_sbx.commands.run("mkdir many && cd many && seq 5001 | xargs touch", timeout=120)
    with pytest.raises(InvalidArgumentException, match="more than 5000 entries"):
        small_sbx.files.list("many", request_timeout=60)
    assert small_sbx.files.exists("many/5001") is True


def test_remove_of_a_deep_tree_works(small_sbx: Any) -> None:
    """files.remove of a 1,100-level tree removes it and the sandbox keeps serving."""
    _deep_tree(small_sbx, "deep", 1100)
    small_sbx.files.remove("deep", request_timeout=120)
    with pytest.raises(FileNotFoundException):
        small_sbx.files.get_info("deep", request_timeout=60)
    assert small_sbx.commands.run("echo alive").stdout == "alive\n"


@pytest.mark.namespaces
def test_deep_tree_of_a_killed_sandbox_is_deleted(small_emu: Emulator, small_sbx: Any) -> None:
    """A 1,100-level tree left by a killed sandbox is deleted by the background deleter."""
    if small_emu.isolation != "namespaces":
        pytest.skip(f"emulator isolation is {small_emu.isolation!r}: {small_emu.isolation_reason}")
    _deep_tree(small_sbx, "deep", 1100)
    small_sbx.kill()
    # the emulator's directory is named <pid>-<token> (beside its <pid>-<token>.lock)
    (root,) = [p for p in Path("/var/tmp/pytest-e2b-env").glob(f"{small_emu.pid}-*") if p.is_dir()]
    trash = root / ".trash"
    eventually(lambda: not any(trash.iterdir()), within=120, what="trash emptied")


def _mkdeep(root: Path, levels: int) -> None:
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for i in range(levels):
            os.mkdir("d" * 40, dir_fd=fd)
            if i % 50 == 0:
                os.symlink("/etc", f"ln{i}", dir_fd=fd)  # never followed by the deleter
            child = os.open("d" * 40, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = child
    finally:
        os.close(fd)


@pytest.mark.full
def test_stale_sweep_removes_trees_deeper_than_the_recursion_limit(tmp_path: Path) -> None:
    """The start-up sweep removes a dead emulator's 1,100- and 3,000-level trees and never raises."""
    from pytest_e2b_env.emulator.isolation.owners import Owner, sweep
    from pytest_e2b_env.standalone.fsops import remove_tree_quietly

    stale = tmp_path / "1-dead"
    alive = None
    try:
        (stale / "a").mkdir(parents=True)
        (stale / "b").mkdir()
        _mkdeep(stale / "a", 1100)
        _mkdeep(stale / "b", 3000)
        (tmp_path / "1-dead.lock").touch()  # its owner is gone: nobody holds the lock
        alive = Owner(tmp_path / "2-alive")  # makes its directory once its lock is held
        sweep(tmp_path)
        assert sorted(p.name for p in tmp_path.iterdir()) == ["2-alive", "2-alive.lock"]
        assert Path("/etc").is_dir()
    finally:  # never leave a tree pytest's own (recursive) tmp cleanup cannot remove
        if alive is not None:
            alive.release()
        remove_tree_quietly(stale)


def _init_of(command_pid: int) -> int:
    """Host pid of the init (pid 1) of the pid namespace a command runs in."""
    ns = os.readlink(f"/proc/{command_pid}/ns/pid")
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            if os.readlink(f"/proc/{name}/ns/pid") != ns:
                continue
            status = Path(f"/proc/{name}/status").read_text()
        except OSError:
            continue
        nspid = next(line.split()[1:] for line in status.splitlines() if line.startswith("NSpid:"))
        if nspid[-1] == "1":
            return int(name)
    raise AssertionError(f"no init found for pid {command_pid}")


@pytest.mark.namespaces
def test_a_sandbox_whose_init_died_is_gone_for_the_files_api(small_emu: Emulator, small_sbx: Any) -> None:
    """When a sandbox's init dies, files calls raise SandboxNotRunningException and it leaves the list."""
    from e2b import SandboxNotRunningException

    if small_emu.isolation != "namespaces":
        pytest.skip(f"emulator isolation is {small_emu.isolation!r}: {small_emu.isolation_reason}")
    handle = small_sbx.commands.run("sleep 60", background=True)
    os.kill(_init_of(handle.pid), 9)  # the init of a sandbox this test created
    with pytest.raises(SandboxNotRunningException):
        small_sbx.files.read("anything.txt", request_timeout=60)
    assert small_sbx.sandbox_id not in [s["sandbox_id"] for s in small_emu.sandboxes()]
