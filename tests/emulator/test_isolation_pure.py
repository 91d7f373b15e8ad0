"""Pure helpers of the isolation package: path normalization and envd's permission strings."""

from __future__ import annotations

import contextlib
import os
import posixpath
import stat
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_e2b_env.emulator.isolation.api import envd_env, home_of
from pytest_e2b_env.standalone.fsops import RootedFS, go_mode_string, normalize

segments = st.lists(st.sampled_from(["a", "b", ".", "..", "", "x y", "ü"]), max_size=8)


@given(segments, st.booleans())
def test_normalize_is_absolute_clean_and_idempotent(parts: list[str], absolute: bool) -> None:
    """Any path normalizes to an absolute path without '.', '..' or empty segments, and stays put after."""
    path = ("/" if absolute else "") + "/".join(parts)
    out = normalize(path, "/home/user")
    assert out.startswith("/")
    assert not out.startswith("//")
    assert all(seg not in (".", "..", "") for seg in out.split("/")[1:]) or out == "/"
    assert normalize(out, "/elsewhere") == out


@given(segments)
def test_relative_paths_start_at_home(parts: list[str]) -> None:
    """A relative path is taken from the home directory, as envd does."""
    rel = "/".join(p for p in parts if p not in ("", ".", "..")) or "."
    assert normalize(rel, "/home/user") == posixpath.normpath(posixpath.join("/home/user", rel))


def test_empty_path_is_home() -> None:
    """An empty path means the home directory."""
    assert normalize("", "/root") == "/root"


@given(st.integers(min_value=0, max_value=0o777), st.sampled_from([stat.S_IFREG, stat.S_IFDIR]))
def test_go_mode_string_matches_ls_for_plain_modes(perm: int, kind: int) -> None:
    """Without special bits Go's FileMode string equals ls's, 'd' included."""
    assert go_mode_string(kind | perm) == stat.filemode(kind | perm)


def test_go_mode_string_special_kinds() -> None:
    """Symlinks, devices and sticky directories use Go's letters (L, Dc, dt)."""
    assert go_mode_string(stat.S_IFLNK | 0o777) == "Lrwxrwxrwx"
    assert go_mode_string(stat.S_IFCHR | 0o666) == "Dcrw-rw-rw-"
    assert go_mode_string(stat.S_IFDIR | stat.S_ISVTX | 0o777) == "dtrwxrwxrwx"
    assert go_mode_string(stat.S_IFREG | stat.S_ISUID | 0o755) == "urwxr-xr-x"


def test_envd_env_order() -> None:
    """PATH, HOME, USER, LOGNAME come first; sandbox envs override them and command envs override both."""
    env = envd_env("user", home_of("user"), {"A": "box", "HOME": "/x"}, {"A": "cmd"})
    assert env["A"] == "cmd"
    assert env["HOME"] == "/x"
    assert env["USER"] == env["LOGNAME"] == "user"
    assert home_of("root") == "/root"


link_targets = st.sampled_from(
    ["/", "..", "../..", "../../..", "/etc", "/outside", "OUTSIDE", "/in", "in", ".", "/x/../..", "loop"]
)
names = st.sampled_from(["in", "a", "b", "loop", "x"])


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    links=st.lists(st.tuples(names, link_targets), max_size=6),
    path=st.lists(
        st.sampled_from(["in", "a", "b", "loop", "x", "..", ".", "secret", "f"]), min_size=1, max_size=6
    ),
)
def test_rooted_fs_never_leaves_its_root(
    tmp_path_factory: pytest.TempPathFactory, links: list[tuple[str, str]], path: list[str]
) -> None:
    """Whatever symlinks sit inside the root, reads, writes and listings stay below it."""
    base = tmp_path_factory.mktemp("rooted")
    root = base / "root"
    (root / "in").mkdir(parents=True)
    (root / "in" / "f").write_text("inside")
    (base / "secret").write_text("SECRET")
    outside = base / "outside"
    outside.mkdir()
    for name, target in links:
        target = target.replace("/outside", str(outside)).replace("OUTSIDE", os.path.relpath(outside, root))
        with contextlib.suppress(FileExistsError):
            os.symlink(target, root / name)
    fd = os.open(root, os.O_PATH | os.O_DIRECTORY)
    fs = RootedFS(fd)
    sandbox_path = normalize("/".join(path), "/")
    try:
        with contextlib.suppress(OSError):
            assert fs.read(sandbox_path) != b"SECRET"
        with contextlib.suppress(OSError):
            for entry in fs.listdir(sandbox_path, 3):
                assert entry["path"].startswith("/")
        with contextlib.suppress(OSError):
            fs.write(sandbox_path + "-new", b"w")
        with contextlib.suppress(OSError):
            fs.remove(sandbox_path)
    finally:
        os.close(fd)
    assert (base / "secret").read_text() == "SECRET"
    assert list(outside.iterdir()) == []  # nothing was written or removed outside the root


def test_a_dotdot_walk_is_retried_while_the_machine_renames(tmp_path: Path) -> None:
    """openat2 answers EAGAIN when a rename anywhere races a ".." walk; the files API tries again
    (a loaded machine renamed while a planted ../../ symlink was read and the read failed).

    Another thread renames in a loop while ".." paths are read; every read succeeds, the right file.
    """
    import threading

    root = tmp_path / "root"
    (root / "a" / "b").mkdir(parents=True)
    (root / "f").write_text("inside")
    os.symlink("../../../../f", root / "a" / "b" / "up")
    spin = tmp_path / "spin"
    spin.mkdir()
    stop = threading.Event()

    def rename() -> None:
        while not stop.is_set():
            os.rename(spin, tmp_path / "spun")
            os.rename(tmp_path / "spun", spin)

    thread = threading.Thread(target=rename, daemon=True)
    fd = os.open(root, os.O_PATH | os.O_DIRECTORY)
    thread.start()
    try:
        fs = RootedFS(fd)
        for _ in range(3000):
            assert fs.read("/a/b/../b/up") == b"inside"
    finally:
        stop.set()
        thread.join(10)
        os.close(fd)
