"""Where a request seen by the fault proxy goes upstream: pure functions, no I/O.

The e2b SDK sends every envd request (commands, files, health) with the headers
``E2b-Sandbox-Id`` and ``E2b-Sandbox-Port``; control-plane requests carry neither. That
lets one loopback port stand in for both the API and every sandbox endpoint.
"""

from __future__ import annotations

from collections.abc import Iterable
from urllib.parse import urlsplit

ENVD_PORT = 49983

# The e2b SDK routes these domains through one edge host by headers; any other domain
# gets a host per sandbox and port. Kept in step with ``e2b.sandbox_domains`` (2.63).
HEADER_ROUTED_DOMAINS = frozenset(
    {
        "e2b.app",
        "e2b.dev",
        "e2b.pro",
        "e2b-staging.dev",
        "e2b-tango.dev",
        "e2b-juliett.dev",
        "foxtrot-2.e2b.dev",
    }
)

# Hop-by-hop headers (RFC 9110 7.6.1) belong to one connection and are never forwarded.
# ``host`` is rewritten by the client for the upstream URL.
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
    }
)


def envd_target(headers: Iterable[tuple[str, str]]) -> tuple[str, int] | None:
    """Return ``(sandbox_id, port)`` when the request is for a sandbox, else ``None``.

    A missing or non-numeric port means envd's own port, which is what the SDK sends.
    """
    sandbox_id: str | None = None
    port = ENVD_PORT
    for name, value in headers:
        lowered = name.lower()
        if lowered == "e2b-sandbox-id":
            sandbox_id = value.strip() or None
        elif lowered == "e2b-sandbox-port" and value.strip().isdigit():
            port = int(value.strip())
    return (sandbox_id, port) if sandbox_id else None


def domain_of_api_url(api_url: str) -> str | None:
    """The sandbox domain implied by an API URL (``https://api.e2b.app`` -> ``e2b.app``), else ``None``."""
    host = urlsplit(api_url).hostname or ""
    return host[len("api.") :] if host.startswith("api.") and host.count(".") >= 2 else None


def is_loopback(url: str) -> bool:
    """Whether ``url`` points at this machine (``localhost``, ``127.0.0.0/8``, ``::1``)."""
    host = (urlsplit(url).hostname or "").lower()
    return host == "localhost" or host == "::1" or host.startswith("127.")


def sandbox_base_url(sandbox_id: str, port: int, *, sandbox_url: str | None, domain: str | None) -> str:
    """The upstream base URL for one sandbox port, as the e2b SDK itself would compute it.

    ``sandbox_url`` (an emulator, or an explicit override) wins; otherwise known E2B domains
    route through ``https://sandbox.{domain}`` by headers and others use ``https://{port}-{id}.{domain}``.
    """
    if sandbox_url:
        return sandbox_url.rstrip("/")
    if not domain:
        raise ValueError(
            f"no sandbox endpoint for sandbox {sandbox_id!r}: pass upstream_sandbox_url, "
            "or an upstream API URL of the form https://api.<domain>"
        )
    if domain in HEADER_ROUTED_DOMAINS:
        return f"https://sandbox.{domain}"
    return f"https://{port}-{sandbox_id}.{domain}"


def forward_headers(headers: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """Request or response headers minus the hop-by-hop ones, order and duplicates kept."""
    return [(name, value) for name, value in headers if name.lower() not in HOP_BY_HOP]


def join_url(base: str, raw_path: str, query: str) -> str:
    """``base`` + the request's path (kept verbatim, percent-escapes included) + its query."""
    path = raw_path if raw_path.startswith("/") else "/" + raw_path
    url = base.rstrip("/") + path
    return f"{url}?{query}" if query else url
