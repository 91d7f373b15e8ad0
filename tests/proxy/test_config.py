"""FaultProxy configuration: bad values are refused with the fix, the key never shows."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_e2b_env.errors import ConfigError
from pytest_e2b_env.proxy import FaultProxy
from pytest_e2b_env.proxy.forward import Forwarder


def test_upstream_must_be_http() -> None:
    """A non-URL upstream names the value and an example."""
    with pytest.raises(ConfigError, match=r"upstream_api_url='api\.e2b\.app' is not an http\(s\) URL"):
        FaultProxy("api.e2b.app", api_key="k")


def test_sandbox_endpoint_must_be_derivable() -> None:
    """Without api.<domain> or an explicit sandbox URL the error asks for upstream_sandbox_url."""
    with pytest.raises(ConfigError, match="pass upstream_sandbox_url"):
        FaultProxy("http://127.0.0.1:3000", api_key="k")


def test_empty_key_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without a key (argument or E2B_API_KEY) the proxy refuses to start and names the variable."""
    monkeypatch.delenv("E2B_API_KEY", raising=False)
    with pytest.raises(ConfigError, match="api_key is empty and E2B_API_KEY is not set"):
        FaultProxy("https://api.e2b.app", api_key="")
    with pytest.raises(ConfigError, match="E2B_API_KEY is not set"):
        FaultProxy()


def test_live_defaults_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """FaultProxy() targets https://api.$E2B_DOMAIN with $E2B_API_KEY, never $E2B_API_URL."""
    monkeypatch.setenv("E2B_API_KEY", "e2b_test_key")
    monkeypatch.setenv("E2B_API_URL", "http://127.0.0.1:1")
    for name in ("E2B_DOMAIN", "PYTEST_E2B_ENV_LIVE_API_URL", "PYTEST_E2B_ENV_LIVE_SANDBOX_URL"):
        monkeypatch.delenv(name, raising=False)
    proxy = FaultProxy()
    assert (proxy.upstream_api_url, proxy.upstream_sandbox_url) == ("https://api.e2b.app", None)
    assert proxy.sdk_opts()["api_key"] == "e2b_test_key"
    monkeypatch.setenv("E2B_DOMAIN", "sbx.example.org")
    assert FaultProxy().upstream_api_url == "https://api.sbx.example.org"
    monkeypatch.setenv("PYTEST_E2B_ENV_LIVE_API_URL", "http://10.0.0.7:3000")
    monkeypatch.setenv("PYTEST_E2B_ENV_LIVE_SANDBOX_URL", "http://10.0.0.7:3001")
    proxy = FaultProxy()
    assert (proxy.upstream_api_url, proxy.upstream_sandbox_url) == (
        "http://10.0.0.7:3000",
        "http://10.0.0.7:3001",
    )


def test_key_never_in_repr(upstream: Any) -> None:
    """repr() shows URLs and state, never the key; sdk_env points everything at the proxy."""
    secret = "e2b_" + "s3cr3t" * 4
    with FaultProxy(upstream.url, upstream.url, api_key=secret) as proxy:
        assert secret not in repr(proxy)
        env = proxy.sdk_env()
        assert env == {"E2B_API_URL": proxy.url, "E2B_SANDBOX_URL": proxy.url, "E2B_API_KEY": secret}
        assert proxy.url.startswith("http://127.0.0.1:")
    assert "stopped" in repr(proxy)


def _scope(path: str, headers: list[tuple[str, str]], query: str = "") -> dict[str, Any]:
    return {
        "type": "http",
        "method": "POST",
        "path": path,
        "raw_path": path.encode(),
        "query_string": query.encode(),
        "headers": [(k.lower().encode(), v.encode()) for k, v in headers],
    }


def test_live_routing_uses_each_sandbox_domain() -> None:
    """Live: control plane to the API, envd to the edge of the domain create answered."""
    domains = {"i1": "e2b.app", "i2": "sbx.example.org"}
    forwarder = Forwarder("https://api.e2b.app", sandbox_url=None, domain_for=domains.get)
    assert forwarder.upstream_url(_scope("/v2/sandboxes", [])) == "https://api.e2b.app/v2/sandboxes"
    envd = [("E2b-Sandbox-Id", "i1"), ("E2b-Sandbox-Port", "49983")]
    assert (
        forwarder.upstream_url(_scope("/files", envd, "path=%2Ftmp%2Fa"))
        == "https://sandbox.e2b.app/files?path=%2Ftmp%2Fa"
    )
    self_hosted = [("E2b-Sandbox-Id", "i2"), ("E2b-Sandbox-Port", "49983")]
    assert (
        forwarder.upstream_url(_scope("/process.Process/Start", self_hosted))
        == "https://49983-i2.sbx.example.org/process.Process/Start"
    )


def test_unreachable_upstream_answers_502_naming_it() -> None:
    """A dead upstream is a 502 whose message names the upstream URL (and never the key)."""
    import e2b
    from e2b.exceptions import SandboxException

    with FaultProxy("http://127.0.0.1:9", "http://127.0.0.1:9", api_key="e2b_k3y_never_shown") as proxy:
        client = e2b.E2B(**proxy.sdk_opts())
        with pytest.raises(SandboxException) as info:
            client.Sandbox.create(timeout=60, retries=0)
    message = str(info.value)
    assert "fault proxy: upstream 'http://127.0.0.1:9/v2/sandboxes' failed: ConnectError" in message
    assert "e2b_k3y_never_shown" not in message
    assert proxy.ledger()[-1]["status"] == 502
