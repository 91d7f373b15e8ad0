"""files.* through the real sync SDK: write/read/list/exists/make_dir/remove/rename/get_info."""

from __future__ import annotations

from typing import Any

import pytest
from e2b import FileNotFoundException, FileType, InvalidArgumentException


def test_write_then_read_text_and_bytes(sbx: Any) -> None:
    """A written file reads back as text and as bytes, and a command sees the same content."""
    info = sbx.files.write("notes/a.txt", "héllo\n")
    assert (info.name, info.path) == ("a.txt", "/home/user/notes/a.txt")
    assert sbx.files.read("/home/user/notes/a.txt") == "héllo\n"
    assert bytes(sbx.files.read("notes/a.txt", format="bytes")) == "héllo\n".encode()
    assert sbx.commands.run("cat notes/a.txt").stdout == "héllo\n"


def test_write_files_and_binary_round_trip(sbx: Any) -> None:
    """write_files writes several files at once; arbitrary bytes survive the round trip."""
    blob = bytes(range(256)) * 4
    infos = sbx.files.write_files([{"path": "m/one.bin", "data": blob}, {"path": "m/two.txt", "data": "2"}])
    assert sorted(i.path for i in infos) == ["/home/user/m/one.bin", "/home/user/m/two.txt"]
    assert bytes(sbx.files.read("m/one.bin", format="bytes")) == blob
    assert sbx.files.read("m/two.txt") == "2"


def test_list_exists_get_info(sbx: Any) -> None:
    """list() shows entries with types and depth; exists() and get_info() agree with it."""
    sbx.files.write("d/sub/f.txt", "abc")
    top = sbx.files.list("d")
    assert [(e.name, e.type) for e in top] == [("sub", FileType.DIR)]
    deep = sbx.files.list("d", depth=2)
    assert sorted(e.path for e in deep) == ["/home/user/d/sub", "/home/user/d/sub/f.txt"]
    assert sbx.files.exists("d/sub/f.txt") is True
    assert sbx.files.exists("d/nope") is False
    info = sbx.files.get_info("d/sub/f.txt")
    assert (info.name, info.type, info.size) == ("f.txt", FileType.FILE, 3)
    assert info.permissions.startswith("-rw")
    with pytest.raises(InvalidArgumentException):
        sbx.files.list("d", depth=0)


def test_make_dir_rename_remove(sbx: Any) -> None:
    """make_dir is True then False; rename moves; remove deletes; each visible to exists()."""
    assert sbx.files.make_dir("x/y") is True
    assert sbx.files.make_dir("x/y") is False
    sbx.files.write("x/y/f", "1")
    moved = sbx.files.rename("x/y/f", "x/g")
    assert moved.path == "/home/user/x/g"
    assert sbx.files.exists("x/y/f") is False
    assert sbx.files.read("x/g") == "1"
    sbx.files.remove("x")
    assert sbx.files.exists("x") is False


def test_missing_paths_raise_file_not_found(sbx: Any) -> None:
    """Reading, listing, stat-ing or removing a missing path raises FileNotFoundException."""
    with pytest.raises(FileNotFoundException):
        sbx.files.read("nope.txt")
    with pytest.raises(FileNotFoundException):
        sbx.files.list("nope-dir")
    with pytest.raises(FileNotFoundException):
        sbx.files.get_info("nope.txt")
    with pytest.raises(FileNotFoundException):
        sbx.files.remove("nope.txt")


@pytest.mark.namespaces
def test_files_written_by_user_are_owned_by_user(sbx: Any, needs_namespaces: None) -> None:
    """Files written as the default user belong to `user`, as on E2B."""
    sbx.files.write("owned/by/me.txt", "x")
    assert sbx.files.get_info("owned/by/me.txt").owner == "user"
    assert sbx.files.get_info("owned").owner == "user"
