"""The proxy's create entries carry allow_internet_access exactly as the emulator's do."""

from __future__ import annotations

from typing import Any

import e2b

from pytest_e2b_env.proxy import FaultProxy

RUN = {"pytest_e2b_env_run": "ledger-create"}


def _creates(target: Any, opts: dict[str, Any]) -> list[tuple[Any, ...]]:
    client = e2b.E2B(**opts)
    mark = target.ledger_mark()
    for internet in (False, True):
        client.Sandbox.create(timeout=60, metadata=RUN, allow_internet_access=internet).kill()
    return [
        (e["op"], e["status"], e.get("allow_internet_access"), e["detail"])
        for e in target.ledger(since=mark)
        if e["op"] == "create"
    ]


def test_create_entries_match_the_emulator(upstream: Any, proxy: FaultProxy) -> None:
    """Both ledgers record each create's allow_internet_access in the same key, detail untouched."""
    direct = _creates(
        upstream, {"api_key": upstream.api_key, "api_url": upstream.url, "sandbox_url": upstream.url}
    )
    proxied = _creates(proxy, proxy.sdk_opts())
    assert direct == proxied == [("create", 201, False, ""), ("create", 201, True, "")]
