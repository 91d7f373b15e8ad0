"""Which credential each request needs, and the answer when it is missing or wrong.

Anyone who reaches the emulator's port may knock, and sandbox ids are no secret (they show in
the world-readable ``/proc/<pid>/mountinfo``), so every door has a key of its own, compared in
constant time, and the app checks it before the fault layer and before reading any body:

* REST control plane (no ``E2b-Sandbox-Id``): ``X-API-KEY``, else 401 ``Invalid API key``;
* envd (port 49983: process and filesystem RPCs, ``/files``, anything else): ``X-Access-Token``,
  else envd's 401; only ``GET /health`` is open, as envd leaves it;
* every other port (49999, the code interpreter, included): ``E2B-Traffic-Access-Token``, else
  the 403 of E2B's edge for a sandbox that enforces its traffic token.

An unknown or dead sandbox needs no key: the edge answers 502 for it, whoever asks. The control
endpoint (``/_emulator/*``, ``X-Emulator-Key``) is guarded by ``wire/control.py`` before this.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable, Mapping

from pytest_e2b_env.wire.answers import Answer, answer, error

ENVD_PORT = "49983"
TRAFFIC_HEADER = "e2b-traffic-access-token"
#: envd's own words for a missing or wrong X-Access-Token
ENVD_REFUSAL = "unauthorized access, please provide a valid access token or method signing if supported"


def _matches(given: str | None, expected: str) -> bool:
    """Whether a header holds the key (constant time; any header value, ASCII or not)."""
    return given is not None and hmac.compare_digest(given.encode("latin-1"), expected.encode("latin-1"))


def _edge_refusal(sandbox_id: str, given: str | None) -> Answer:
    # E2B's orchestrator proxy, for a sandbox whose ingress enforces a traffic access token
    why = (
        f"Token header '{TRAFFIC_HEADER}' is missing"
        if given is None
        else f"Provided token in header '{TRAFFIC_HEADER}' is invalid"
    )
    message = f"Sandbox is secured with traffic access token. {why}"
    return answer(403, {"sandboxId": sandbox_id, "message": message, "code": 403})


def refusal(
    method: str,
    path: str,
    headers: Mapping[str, str],
    api_key: str,
    keys_of: Callable[[str], tuple[str, str] | None],
) -> Answer | None:
    """The answer refusing this request, or None when it carries its door's key.

    ``headers`` are lower-cased; ``keys_of`` gives a running sandbox's
    ``(envd access token, traffic access token)``, None for any other id.
    """
    sandbox_id = headers.get("e2b-sandbox-id")
    if sandbox_id is None:
        return None if _matches(headers.get("x-api-key"), api_key) else error(401, "Invalid API key")
    keys = keys_of(sandbox_id)
    if keys is None:
        return None  # unknown or dead: the edge's 502 follows, with nothing to protect
    envd_token, traffic_token = keys
    if headers.get("e2b-sandbox-port", ENVD_PORT) == ENVD_PORT:
        if method == "GET" and path == "/health":
            return None
        if _matches(headers.get("x-access-token"), envd_token):
            return None
        return error(401, ENVD_REFUSAL)
    given = headers.get(TRAFFIC_HEADER)
    return None if _matches(given, traffic_token) else _edge_refusal(sandbox_id, given)
