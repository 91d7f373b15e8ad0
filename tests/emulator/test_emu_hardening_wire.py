"""Untrusted requests (bodies, types, headers, queries) get bounded 4xx answers, never 500s or memory."""

from __future__ import annotations

import base64
import gzip
import json
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from e2b import Sandbox, SandboxQuery

from pytest_e2b_env.emulator import Emulator
from pytest_e2b_env.emulator.limits import Limits
from pytest_e2b_env.errors import EmulatorError
from pytest_e2b_env.wire.jsonin import JSONTooDeep, depth_of, loads_bounded


def rss_kib(pid: int | None) -> int:
    """Resident memory of a process, from /proc."""
    with open(f"/proc/{pid}/status") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith("VmRSS:"))


def _chunks(total: int, size: int = 1 << 20) -> Iterator[bytes]:
    block = b"x" * size
    for _ in range(total // size):
        yield block


def _create(emu: Emulator, body: Any, raw: bytes | None = None) -> httpx.Response:
    content = raw if raw is not None else json.dumps(body).encode()
    headers = {"X-API-KEY": emu.api_key, "Content-Type": "application/json"}
    return httpx.post(f"{emu.url}/v2/sandboxes", content=content, headers=headers, timeout=60)


def _kill_if_created(emu: Emulator, response: httpx.Response) -> None:
    if response.status_code == 201:
        sandbox_id = response.json()["sandboxID"]
        httpx.delete(f"{emu.url}/sandboxes/{sandbox_id}", headers={"X-API-KEY": emu.api_key}, timeout=60)


def test_unauthenticated_body_is_never_buffered(small_emu: Emulator) -> None:
    """A 200 MiB POST with a wrong key is answered 401 (or cut) without the body entering memory."""
    before = rss_kib(small_emu.pid)
    headers = {"X-API-KEY": "e2b_wrong", "Content-Type": "application/json"}
    try:
        response = httpx.post(
            f"{small_emu.url}/v2/sandboxes", content=_chunks(200 << 20), headers=headers, timeout=120
        )
        assert response.status_code == 401
    except httpx.TransportError:
        pass  # the server answered 401 and closed before the client finished sending
    assert rss_kib(small_emu.pid) - before < 64 << 10


def test_oversized_metadata_body_is_413(small_emu: Emulator) -> None:
    """An authenticated create body above body_bytes answers 413 naming the limit."""
    response = _create(small_emu, {"templateID": "base", "metadata": {"k": "v" * (128 << 10)}})
    _kill_if_created(small_emu, response)
    assert response.status_code == 413
    assert "larger than 65536 bytes" in response.json()["message"]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"allow_internet_access": "false"}, "allow_internet_access must be a boolean, got string"),
        ({"allow_internet_access": 0}, "allow_internet_access must be a boolean, got number"),
        ({"network": {"denyOut": 5}}, "network.denyOut must be an array of strings, got 5"),
        ({"network": {"denyOut": [1]}}, "network.denyOut must be an array of strings"),
        ({"network": "none"}, "network must be an object, got string"),
        ({"secure": "yes"}, "secure must be a boolean"),
        ({"metadata": {"k": 1}}, "metadata must be an object of string values"),
        ({"timeout": "5"}, "timeout must be an integer"),
    ],
)
def test_create_rejects_wrong_field_types(small_emu: Emulator, body: dict[str, Any], field: str) -> None:
    """A create field of the wrong JSON type answers 400 naming the field; no sandbox starts."""
    response = _create(small_emu, {"templateID": "base", **body})
    _kill_if_created(small_emu, response)
    assert response.status_code == 400
    assert field in response.json()["message"]


def test_deeply_nested_json_is_400(small_emu: Emulator) -> None:
    """A create body nesting 20,000 levels answers 400 naming the depth limit, not a 500."""
    raw = b'{"templateID": "base", "metadata": ' + b"[" * 20_000 + b"]" * 20_000 + b"}"
    response = _create(small_emu, None, raw=raw)
    assert response.status_code == 400
    assert "more than the limit of 32" in response.json()["message"]
    rule = "[" * 5000 + "]" * 5000
    control = httpx.post(
        f"{small_emu.url}/_emulator/faults",
        content=rule,
        headers={"X-Emulator-Key": small_emu.control_key},
        timeout=60,
    )
    assert control.status_code == 400


def _files(emu: Emulator, sbx: Any, method: str, **kw: Any) -> httpx.Response:
    headers = {
        "E2b-Sandbox-Id": sbx.sandbox_id,
        "E2b-Sandbox-Port": "49983",
        "X-Access-Token": sbx._envd_access_token,
        **kw.pop("headers", {}),
    }
    return httpx.request(method, f"{emu.url}/files", headers=headers, timeout=60, **kw)


def test_malformed_basic_auth_on_files_is_401(small_emu: Emulator, small_sbx: Any) -> None:
    """GET /files with an Authorization: Basic that is not base64 (or not UTF-8) answers 401, not a 500."""
    response = _files(
        small_emu, small_sbx, "GET", params={"path": "x"}, headers={"Authorization": "Basic abc"}
    )
    assert response.status_code == 401
    assert "malformed Authorization header" in response.json()["message"]
    not_utf8 = {"Authorization": "Basic " + base64.b64encode(b"\xff\xfe:").decode()}
    assert _files(small_emu, small_sbx, "GET", params={"path": "x"}, headers=not_utf8).status_code == 401
    good = base64.b64encode(b"user:").decode()
    ok = _files(
        small_emu,
        small_sbx,
        "GET",
        params={"path": "/etc/hostname"},
        headers={"Authorization": f"Basic {good}"},
    )
    assert ok.status_code == 200


def test_overlong_path_is_400(small_emu: Emulator, small_sbx: Any) -> None:
    """A 5,000-character path or cwd answers 400 naming its length over HTTP, INVALID_ARGUMENT over RPC."""
    from e2b import InvalidArgumentException

    path = "/home/user/" + "a" * 5000
    response = _files(small_emu, small_sbx, "GET", params={"path": path})
    assert response.status_code == 400
    assert "5011 characters is too long" in response.json()["message"]
    with pytest.raises(InvalidArgumentException, match="too long"):
        small_sbx.files.get_info(path)
    with pytest.raises(InvalidArgumentException, match="too long"):
        small_sbx.files.write(path, "x")
    with pytest.raises(InvalidArgumentException, match="cwd of 5011 characters is too long"):
        small_sbx.commands.run("true", cwd=path)


def test_gzip_bomb_upload_is_413(small_emu: Emulator, small_sbx: Any) -> None:
    """A gzip upload inflating past file_bytes answers 413 and writes nothing."""
    bomb = gzip.compress(b"\0" * (8 << 20))
    response = _files(
        small_emu,
        small_sbx,
        "POST",
        params={"path": "bomb"},
        content=bomb,
        headers={"Content-Type": "application/octet-stream", "Content-Encoding": "gzip"},
    )
    assert response.status_code == 413
    assert small_sbx.files.exists("bomb") is False
    small_sbx.files.write("small.gz.txt", "fits", gzip=True)
    assert small_sbx.files.read("small.gz.txt") == "fits"


def test_upload_above_the_file_cap_is_413(small_emu: Emulator, small_sbx: Any) -> None:
    """A plain upload above upload_bytes answers 413 without the body being kept."""
    response = _files(
        small_emu,
        small_sbx,
        "POST",
        params={"path": "huge"},
        content=b"x" * (3 << 20),
        headers={"Content-Type": "application/octet-stream"},
    )
    assert response.status_code == 413


def test_metadata_query_matches_values_with_special_characters(small_emu: Emulator) -> None:
    """Sandbox.list(SandboxQuery(metadata=...)) finds values holding '&', '=', spaces and '+'."""
    metadata = {"k 1": "a b&c=d+e%f", "plain": "x"}
    sbx = Sandbox.create(timeout=120, metadata=metadata, **small_emu.sdk_opts())
    try:
        found = Sandbox.list(query=SandboxQuery(metadata=metadata), **small_emu.sdk_opts()).next_items()
        assert [s.sandbox_id for s in found] == [sbx.sandbox_id]
        other = Sandbox.list(query=SandboxQuery(metadata={"k 1": "a b&c"}), **small_emu.sdk_opts())
        assert other.next_items() == []
    finally:
        sbx.kill()


def test_json_depth_is_measured_without_recursion() -> None:
    """depth_of ignores brackets inside strings and handles a million levels."""
    assert depth_of(b'{"a": [1, {"b": "[[[["}]}') == 3
    assert depth_of(b"[" * 1_000_000) == 1_000_000
    assert loads_bounded(b'{"a": "]]]"}', 1) == {"a": "]]]"}
    with pytest.raises(JSONTooDeep):
        loads_bounded(b"[[[]]]", 2)


def test_limits_reject_unknown_or_bad_fields() -> None:
    """Emulator(limits=...) names an unknown field or a non-positive value before starting."""
    with pytest.raises(EmulatorError, match="unknown field 'file_size'"):
        Emulator(limits={"file_size": 1})
    with pytest.raises(EmulatorError, match="file_bytes=0 must be a positive number"):
        Emulator(limits={"file_bytes": 0})
    assert Limits.build({"file_bytes": 10}).upload_bytes == 10 + (1 << 20)


def test_cli_rejects_bad_limits_in_one_line() -> None:
    """A malformed --limits makes the CLI exit 2 with one line naming the field."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest_e2b_env.cli",
            "emulator",
            "--port",
            "0",
            "--limits",
            '{"file_bytes": -1}',
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "pytest-e2b-env emulator: limits: file_bytes=-1 must be a positive number"
    ]
