"""The one ledger middleware of both backends: one entry per request, the same format everywhere.

Sits outside the fault middleware, so an injected answer is recorded with the status the SDK
saw and the fault's label in ``detail``. What a request did to a sandbox comes from the app
behind it when that app knows (the emulator leaves ``SCOPE_SANDBOX``, ``SCOPE_INTERNET`` and
``SCOPE_METADATA`` in the scope), else from the wire (the proxy before real E2B): create and
connect answers are small JSON documents, teed (never held back) to learn the new sandbox's id
and domain, and a create entry's ``allow_internet_access`` and metadata keys are read from the
create request (E2B's rule).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from pytest_e2b_env.wire.faults import (
    SCOPE_DROPPED,
    SCOPE_FAULT,
    ASGIApp,
    Message,
    Receive,
    Scope,
    Send,
    content_length,
)
from pytest_e2b_env.wire.ledger import Ledger, op_for
from pytest_e2b_env.wire.routes import route_of

#: scope keys an app behind the middleware sets when it knows: the sandbox a request concerned,
#: and for a request that created one its internet setting and metadata keys
SCOPE_SANDBOX = "pytest_e2b_env.sandbox_id"
SCOPE_INTERNET = "pytest_e2b_env.allow_internet_access"
SCOPE_METADATA = "pytest_e2b_env.metadata_keys"
#: scope key an app behind the middleware sets when its answer is its own failure, not the request's
#: (an emulator bug, a sandbox it could not start, an upstream the proxy could not reach)
SCOPE_HARNESS = "pytest_e2b_env.harness_error"

# Only these answers are parsed; anything larger is not a create/connect answer.
_TEE_LIMIT = 64 * 1024
_TEE_OPS = frozenset({"create", "connect"})


def sandbox_of_answer(body: bytes) -> tuple[str | None, str | None]:
    """``(sandboxID, domain)`` from a create/connect answer body, ``(None, None)`` if unparsable."""
    try:
        doc = json.loads(body)
    except ValueError:
        return None, None
    if not isinstance(doc, dict):
        return None, None
    sandbox_id, domain = doc.get("sandboxID"), doc.get("domain")
    return (
        sandbox_id if isinstance(sandbox_id, str) else None,
        domain if isinstance(domain, str) and domain else None,
    )


def internet_of_create(body: bytes) -> bool | None:
    """Whether a create request body leaves internet access on (E2B's rule), ``None`` if unparsable.

    Off when ``allow_internet_access`` is false or ``network.denyOut`` holds ``0.0.0.0/0``.
    """
    try:
        request = json.loads(body)
    except ValueError:
        return None
    if not isinstance(request, dict):
        return None
    network = request.get("network")
    deny = network.get("denyOut") if isinstance(network, dict) else None
    return request.get("allow_internet_access") is not False and "0.0.0.0/0" not in (deny or [])


#: The lifetime E2B gives a sandbox whose create request names none (its API's default).
DEFAULT_LIFETIME_S = 15.0


def lifetime_of_create(body: bytes) -> tuple[float | None, bool | None]:
    """``(lifetime in seconds, auto-pause)`` a create request body asks for; ``(None, None)`` if unparsable.

    At the end of its lifetime the sandbox is killed, or paused (kept) when ``autoPause`` is true.
    """
    try:
        request = json.loads(body)
    except ValueError:
        return None, None
    if not isinstance(request, dict):
        return None, None
    timeout = request.get("timeout", DEFAULT_LIFETIME_S)
    lifetime = float(timeout) if isinstance(timeout, int | float) and not isinstance(timeout, bool) else None
    return lifetime, request.get("autoPause") is True


def metadata_keys_of_create(body: bytes) -> list[str] | None:
    """The metadata keys a create request body asks for, ``None`` if unparsable."""
    try:
        request = json.loads(body)
    except ValueError:
        return None
    metadata = request.get("metadata") if isinstance(request, dict) else None
    return sorted(str(k) for k in metadata) if isinstance(metadata, dict) else []


#: ``on_sandbox(sandbox_id, domain, allow_internet_access)`` for each answer naming a sandbox
OnSandbox = Callable[[str, "str | None", "bool | None"], None]


class RecordingMiddleware:
    """Record every HTTP request passing through ``app`` into ``ledger``.

    ``on_sandbox`` is called for each create/connect answer that names a sandbox, with the
    internet setting of a create request (``None`` for connect). ``derive=False`` trusts the
    app's scope facts alone and never tees a body (the emulator knows what it did).
    """

    def __init__(
        self, app: ASGIApp, ledger: Ledger, on_sandbox: OnSandbox | None = None, derive: bool = True
    ) -> None:
        self.app = app
        self.ledger = ledger
        self.on_sandbox = on_sandbox
        self.derive = derive

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        method, path = scope["method"], scope["path"]
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        template, sandbox_id = route_of(method, path, headers)
        op = op_for(template)
        tee = self.derive and op in _TEE_OPS
        # A create's own request (small JSON) is always kept: the lifetime it asks for is ledgered.
        keep_request = tee or op == "create"
        state: dict[str, Any] = {"status": None, "recorded": False, "body": bytearray(), "length": None}
        request_body = bytearray()

        async def teeing_receive() -> Message:
            message = await receive()
            if message["type"] == "http.request" and len(request_body) < _TEE_LIMIT:
                request_body.extend(message.get("body", b""))
            return message

        def record() -> None:
            if state["recorded"]:
                return
            state["recorded"] = True
            found = scope.get(SCOPE_SANDBOX) or sandbox_id
            internet = scope.get(SCOPE_INTERNET)
            keys = scope.get(SCOPE_METADATA)
            if tee and internet is None and state["status"] is not None and state["status"] < 300:
                # A drop_stream fault behind us withheld the body; it left it in the scope.
                answer = bytes(state["body"]) or bytes(scope.get(SCOPE_DROPPED, b""))
                new_id, domain = sandbox_of_answer(answer)
                if new_id:
                    found = new_id
                    internet = internet_of_create(bytes(request_body)) if op == "create" else None
                    keys = metadata_keys_of_create(bytes(request_body)) if op == "create" else None
                    if self.on_sandbox is not None:
                        self.on_sandbox(new_id, domain, internet)
            fault = scope.get(SCOPE_FAULT)
            # As in the emulator's ledger: a faulted request is op "fault", its label the detail,
            # except a create that made its sandbox (its answer lost): that stays a create.
            created = op == "create" and internet is not None
            lifetime, pause = lifetime_of_create(bytes(request_body)) if created else (None, None)
            self.ledger.record(
                "fault" if fault and not created else op,
                method=method,
                route=template,
                sandbox_id=found,
                status=state["status"],
                detail=str(fault or ""),
                fault=str(fault) if fault else None,
                allow_internet_access=internet,  # as the emulator: on entries that created a sandbox
                metadata_keys=keys,
                # an injected fault is the plan's answer, never the target's own failure
                harness_error=None if fault else scope.get(SCOPE_HARNESS),
                lifetime_s=lifetime,
                auto_pause=pause,
            )

        async def recording_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                state["status"] = message["status"]
                state["length"] = content_length(message.get("headers", []))
                if not tee:
                    # Streams may stay open for minutes: record when the answer starts.
                    record()
            elif message["type"] == "http.response.body" and tee:
                if len(state["body"]) < _TEE_LIMIT:
                    state["body"] += message.get("body", b"")
                # Record before the client can have the whole answer: a relayed body ends with
                # an empty message that arrives after the client already read Content-Length bytes.
                complete = state["length"] is not None and len(state["body"]) >= state["length"]
                if complete or not message.get("more_body", False):
                    record()
            await send(message)

        counted = op == "create"
        if counted:
            self.ledger.creating(+1)
        try:
            await self.app(scope, teeing_receive if keep_request else receive, recording_send)
        finally:
            record()
            if counted:
                self.ledger.creating(-1)
