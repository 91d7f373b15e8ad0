"""The isolation backend contract the server relies on, checked on every level this machine has."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from pytest_e2b_env.emulator.isolation import Backend, Box, select_backend
from pytest_e2b_env.errors import EmulatorError


@pytest.fixture(scope="module", params=["process", "namespaces"])
def backend(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Backend]:
    """A backend of each level (the namespaces one skips with its reason where unavailable)."""
    root = Path("/var/tmp/pytest-e2b-env") / f"{os.getpid()}-api-{request.param}"
    try:
        chosen = select_backend(root=root, force=request.param)
    except EmulatorError as exc:
        pytest.skip(str(exc))
    yield chosen
    chosen.close()
    assert not root.exists()


@pytest.fixture
def box(backend: Backend) -> Iterator[Box]:
    """A fresh sandbox, killed after the test."""
    started = backend.start(f"t{uuid.uuid4().hex[:12]}", internet=False, envs={"BOX_VAR": "box"})
    yield started
    started.kill()


def run(box: Box, cmd: str, user: str = "user", cwd: str = "/home/user", **envs: str) -> tuple[int, str, str]:
    """Run a command to completion: (exit code, stdout, stderr)."""
    proc = box.spawn(cmd, envs, cwd, user, False)
    out, err = proc.communicate(timeout=30)
    return proc.returncode, out.decode(), err.decode()


def test_level_and_reason_are_reported(backend: Backend) -> None:
    """The backend names its level and explains why it was chosen."""
    assert backend.level in ("namespaces", "process")
    assert backend.reason


def test_forced_process_level_says_so(tmp_path: Path) -> None:
    """Forcing the plain-process level is reflected in level and reason."""
    chosen = select_backend(root=tmp_path / "forced", force="process")
    assert chosen.level == "process"
    assert "forced" in chosen.reason
    chosen.close()


def test_unknown_level_is_rejected(tmp_path: Path) -> None:
    """A misspelt level names the value and the choices."""
    with pytest.raises(ValueError, match="force='proces' is not an isolation level"):
        select_backend(root=tmp_path, force="proces")  # type: ignore[arg-type]


def test_command_gets_envd_environment(box: Box) -> None:
    """Commands see envd's PATH/USER/LOGNAME/HOME, then sandbox envs, then command envs (last wins)."""
    code, out, _ = run(box, 'echo "$USER|$LOGNAME|$BOX_VAR|$CMD_VAR|$PATH"', CMD_VAR="cmd")
    assert code == 0
    user, logname, box_var, cmd_var, path = out.strip().split("|")
    assert (user, logname, box_var, cmd_var) == ("user", "user", "box", "cmd")
    assert "/usr/bin" in path.split(":")  # bash -l: /etc/profile may rewrite envd's PATH, as on E2B
    _, out, _ = run(box, "echo $BOX_VAR", BOX_VAR="override")
    assert out.strip() == "override"


def test_exit_code_and_streams_are_separate(box: Box) -> None:
    """stdout, stderr and the exit code of bash -c come back separately."""
    assert run(box, "echo out; echo err >&2; exit 3") == (3, "out\n", "err\n")


def test_missing_cwd_raises_before_spawning(box: Box) -> None:
    """A missing cwd is FileNotFoundError and a file cwd NotADirectoryError, both before anything runs."""
    with pytest.raises(FileNotFoundError):
        box.spawn("touch /home/user/ran", {}, "/home/user/nope", "user", False)
    box.fs.write("/home/user/afile", b"x")
    with pytest.raises(NotADirectoryError):
        box.spawn("touch /home/user/ran", {}, "/home/user/afile", "user", False)
    assert box.fs.stat("/home/user/ran") is None


def test_stdin_pipe_only_when_asked(box: Box) -> None:
    """stdin is a pipe when asked for, /dev/null otherwise."""
    proc = box.spawn("cat", {}, "/home/user", "user", True)
    out, _ = proc.communicate(b"ping\n", timeout=30)
    assert out == b"ping\n"
    assert run(box, "cat; echo done") == (0, "done\n", "")


def test_signal_reaches_the_leader(box: Box) -> None:
    """box.signal kills the command's leader, which reports the signal."""
    proc = box.spawn("sleep 60", {}, "/home/user", "user", False)
    box.signal(proc, signal.SIGKILL)
    proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGKILL


def test_files_round_trip(box: Box) -> None:
    """write/read/stat/listdir/mkdir/move/remove behave like envd's file API."""
    fs = box.fs
    info = fs.write("/home/user/dir/a.txt", b"hello")
    assert (info["name"], info["type"], info["path"], info["size"]) == (
        "a.txt",
        "file",
        "/home/user/dir/a.txt",
        5,
    )
    assert info["permissions"] == "-rw-r--r--"
    assert info["mode"] == 0o644
    assert fs.read("dir/a.txt") == b"hello"  # relative to the home directory
    assert fs.mkdir("/home/user/dir/sub/deeper") is True
    assert fs.mkdir("/home/user/dir/sub") is False
    listed = [(e["path"], e["type"]) for e in fs.listdir("/home/user/dir", 2)]
    assert listed == [
        ("/home/user/dir/a.txt", "file"),
        ("/home/user/dir/sub", "dir"),
        ("/home/user/dir/sub/deeper", "dir"),
    ]
    assert [e["name"] for e in fs.listdir("/home/user/dir", 1)] == ["a.txt", "sub"]
    moved = fs.move("/home/user/dir/a.txt", "/home/user/other/b.txt")
    assert moved["path"] == "/home/user/other/b.txt"
    assert fs.stat("/home/user/dir/a.txt") is None
    fs.remove("/home/user/dir")
    assert fs.stat("/home/user/dir") is None
    stat = fs.stat("/home/user")
    assert stat is not None
    assert stat["type"] == "dir"
    assert stat["permissions"].startswith("d")


def test_file_errors_have_builtin_types(box: Box) -> None:
    """Missing, not-a-directory, is-a-directory and exists errors are the builtin OSError subclasses."""
    fs = box.fs
    fs.write("/home/user/f", b"1")
    with pytest.raises(FileNotFoundError):
        fs.read("/home/user/missing")
    with pytest.raises(NotADirectoryError):
        fs.listdir("/home/user/f")
    with pytest.raises(NotADirectoryError):
        fs.read("/home/user/f/x")
    with pytest.raises(IsADirectoryError):
        fs.read("/home/user")
    with pytest.raises(FileExistsError):
        fs.mkdir("/home/user/f")
    with pytest.raises(FileNotFoundError):
        fs.remove("/home/user/missing")
    with pytest.raises(FileNotFoundError):
        fs.move("/home/user/missing", "/home/user/x")
    with pytest.raises(ValueError, match="depth=0"):
        fs.listdir("/home/user", 0)


def test_files_written_by_api_are_seen_by_commands(box: Box) -> None:
    """A file written through the API is what a command in the home directory reads, and back."""
    box.fs.write("/home/user/in.txt", b"from-api")
    assert run(box, "cat in.txt && printf from-cmd > out.txt") == (0, "from-api", "")
    assert box.fs.read("/home/user/out.txt") == b"from-cmd"


def test_planted_symlinks_resolve_inside_the_sandbox(box: Box) -> None:
    """Symlinks planted by sandbox code to host files or ../../ never let the files API reach the host."""
    secret = Path("/etc/hostname").read_bytes()
    code, _, _ = run(
        box, "ln -s /etc/hostname host-abs; ln -s ../../../../../../etc/hostname host-rel; ln -s / up"
    )
    assert code == 0
    for name in ("host-abs", "host-rel", "up/etc/hostname"):
        with contextlib.suppress(FileNotFoundError, NotADirectoryError):
            assert box.fs.read(f"/home/user/{name}") != secret
    link = box.fs.stat("/home/user/host-abs")
    assert link is not None
    assert link["type"] == "symlink"
    assert link["symlink_target"] == "/etc/hostname"
    with contextlib.suppress(FileNotFoundError, PermissionError):
        box.fs.write("/home/user/host-abs", b"clobber")  # follows the link inside the sandbox only
    assert Path("/etc/hostname").read_bytes() == secret
    box.fs.remove("/home/user/up")  # removes the link, not what it points at
    assert Path("/etc/hostname").exists()


def test_kill_takes_setsid_daemons_and_files(box: Box) -> None:
    """kill() ends every process of the sandbox, setsid daemons included, and removes its files."""
    marker = f"sleep-{uuid.uuid4().hex[:8]}"
    code, _, _ = run(box, f"(setsid bash -c 'exec -a {marker} sleep 300' >/dev/null 2>&1 &) ; true")
    assert code == 0
    assert _eventually(lambda: _host_pids_named(marker))
    box.kill()
    assert not _host_pids_named(marker)
    assert not box.alive()
    box.kill()  # idempotent


def test_spawn_after_kill_fails(box: Box) -> None:
    """A killed sandbox runs nothing."""
    box.kill()
    with pytest.raises(OSError):
        box.spawn("true", {}, "/home/user", "user", False)


def test_unknown_user_is_rejected(box: Box) -> None:
    """Only the sandbox's accounts exist."""
    with pytest.raises(ValueError, match="user='admin'"):
        box.spawn("true", {}, "/home/user", "admin", False)


def _eventually(check: Callable[[], object], seconds: float = 10) -> object:
    """Poll ``check`` until it is truthy or ``seconds`` pass; returns its last value."""
    deadline = time.monotonic() + seconds
    while not (value := check()) and time.monotonic() < deadline:
        time.sleep(0.02)
    return value


def _host_pids_named(name: str) -> list[int]:
    """Host pids whose command line starts with ``name``."""
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as fh:
                    if fh.read().split(b"\0")[0] == name.encode():
                        pids.append(int(entry))
            except OSError:
                continue
    return pids


def test_run_helper_works_with_subprocess_types(box: Box) -> None:
    """spawn returns a real subprocess.Popen whose pid is a host pid."""
    proc = box.spawn("echo $$", {}, "/home/user", "user", False)
    assert isinstance(proc, subprocess.Popen)
    proc.communicate(timeout=30)
    assert proc.pid > 0


def test_command_env_cannot_reach_host_side_helpers(box: Box) -> None:
    """LD_PRELOAD and friends in a command's envs only affect the command itself, inside the sandbox."""
    code, out, _ = run(box, 'echo "$LD_PRELOAD|$WEIRD"', LD_PRELOAD="/nonexistent/evil.so", WEIRD="a b;c'd")
    assert code == 0
    assert out.endswith("/nonexistent/evil.so|a b;c'd\n")


@pytest.mark.parametrize("bad", ["", "../escape", "a/b", ".hidden", "x" * 65])
def test_sandbox_ids_cannot_name_other_paths(backend: Backend, bad: str) -> None:
    """A sandbox id that is not a plain name is rejected with the value and the rule."""
    with pytest.raises(ValueError, match="is not a valid id"):
        backend.start(bad, internet=False, envs={})


FALLBACK = """
from pytest_e2b_env.emulator.isolation import select_backend
backend = select_backend()
box = backend.start("fallback", internet=False, envs={})
proc = box.spawn("id -u", {}, "/home/user", "user", False)
out, _ = proc.communicate()
box.kill()
backend.close()
print(backend.level, out.decode().strip(), backend.reason, sep="|")
"""


def test_unprivileged_owner_falls_back_to_process_level() -> None:
    """Without root, and with no subordinate ids for a user namespace, the backend is the process
    level, and its reason names what is missing and the command that adds it."""
    from pytest_e2b_env.emulator.isolation.ids import Ids

    if os.geteuid() != 0 or Ids().nested or not os.path.exists("/usr/bin/setpriv"):
        pytest.skip("needs host root and setpriv to run a child as an unprivileged user")
    package_parent = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3", "-c", FALLBACK],
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(package_parent)},
        capture_output=True,
        timeout=60,
        cwd="/",
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    level, uid, reason = done.stdout.decode().strip().split("|")
    assert (level, uid) == ("process", "65534")
    assert reason == (
        "plain-process level (no isolation): not root (euid 65534): no subordinate ids for nobody "
        "(uid 65534) in /etc/subuid and /etc/subgid (at least 192 needed): "
        "sudo usermod --add-subuids 100000-165535 --add-subgids 100000-165535 nobody"
    )
