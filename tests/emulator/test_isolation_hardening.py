"""The host <-> sandbox-init channel can never pair a request with another request's reply."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pytest_e2b_env.emulator.isolation import select_backend
from pytest_e2b_env.errors import EmulatorError, InfrastructureError
from pytest_e2b_env.standalone import frames


@pytest.fixture(scope="module")
def ns_backend() -> Iterator[Any]:
    """A namespaces backend of its own (skips with the reason where unavailable)."""
    root = Path("/var/tmp/pytest-e2b-env") / f"{os.getpid()}-hardening-ns"
    try:
        chosen = select_backend(root=root, force="namespaces")
    except EmulatorError as exc:
        pytest.skip(str(exc))
    yield chosen
    chosen.close()


@pytest.mark.namespaces
def test_a_stale_reply_poisons_the_channel_instead_of_answering_the_next_request(ns_backend: Any) -> None:
    """A reply left unread on the channel is never returned for a later request; the sandbox ends instead."""
    box = ns_backend.start(f"t{uuid.uuid4().hex[:12]}", internet=False)
    try:
        box.fs.write("/root/secret", b"root only", user="root")
        # the writable layer is the sandbox's own tmpfs (not on the host disk): chmod from inside
        chmod = box.spawn("chmod 600 /root/secret", {}, "/", "root")
        try:
            assert chmod.wait(timeout=30) == 0
        finally:
            for stream in (chmod.stdout, chmod.stderr, chmod.stdin):
                if stream is not None:
                    stream.close()
        # a request whose reply nobody reads, as when a caller gave up waiting on a slow answer
        frames.send(box._sock, {"op": "read", "path": "/root/secret", "user": "root", "id": 10_000})
        with pytest.raises((InfrastructureError, ProcessLookupError)) as caught:
            box.fs.read("/home/user/.profile", user="user")
        assert "root only" not in str(caught.value)
        with pytest.raises((InfrastructureError, ProcessLookupError)):
            box.fs.read("/root/secret", user="user")
        assert not box.alive()
    finally:
        box.kill()
