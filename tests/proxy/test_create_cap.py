"""The fault proxy's sandbox cap: creates past it are answered by the proxy and never reach the upstream."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_e2b_env.proxy import FaultProxy


def test_a_create_past_the_cap_is_refused_naming_it(upstream: Any) -> None:
    """With a cap of 1 the second create raises with the cap's message, the upstream made one sandbox,
    and a create a fault answered in the proxy's place is not counted against the cap."""
    from e2b import Sandbox

    before = {e["sandbox_id"] for e in upstream.ledger() if e.get("op") == "create" and e.get("sandbox_id")}
    with FaultProxy(upstream.url, upstream.url, api_key=upstream.api_key, max_creates=1) as proxy:
        assert proxy.cap is not None
        proxy.faults.add(route="POST /v2/sandboxes", answer={"status": 500}, times=1)
        with pytest.raises(Exception):  # noqa: B017  (the SDK's own class for a 500)
            Sandbox.create(**proxy.sdk_opts())
        sandbox = Sandbox.create(**proxy.sdk_opts())
        try:
            with pytest.raises(Exception, match=r"the sandbox cap of this run \(1 created\) is reached"):
                Sandbox.create(**proxy.sdk_opts())
        finally:
            sandbox.kill()
        assert (proxy.cap.forwarded, proxy.cap.refused) == (1, 1)
        refused = [e for e in proxy.ledger() if e.get("status") == 403]
        assert len(refused) == 1
    made = {e["sandbox_id"] for e in upstream.ledger() if e.get("op") == "create" and e.get("sandbox_id")}
    assert made - before == {sandbox.sandbox_id}
