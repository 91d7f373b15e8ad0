"""E2B's REST control plane: create, connect, kill, set_timeout, get_info, list.

Answers and error bodies follow E2B's API (``{"code", "message"}`` with the right status), so
the SDK's own ``handle_api_exception`` produces the exceptions users see on E2B.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import datetime as dt
import json
from collections.abc import Mapping
from typing import Any
from urllib.parse import parse_qsl, unquote_plus

from pytest_e2b_env.emulator.limits import Limits
from pytest_e2b_env.emulator.sandboxes import DEFAULT_TIMEOUT_S, MAX_TIMEOUT_S, Registry, Sandbox
from pytest_e2b_env.wire.answers import Answer, answer, error
from pytest_e2b_env.wire.jsonin import JSONTooDeep, loads_bounded

LIST_LIMIT_MAX = 100


def _not_found(sandbox_id: str) -> Answer:
    return error(404, f'sandbox "{sandbox_id}" not found')


def _json_body(body: bytes, max_depth: int) -> dict[str, Any] | str:
    """The body as a JSON object, or the error message (bad JSON, too deep, not an object)."""
    if not body.strip():
        return {}
    try:
        value = loads_bounded(body, max_depth)
    except JSONTooDeep as exc:
        return f"request body: {exc}"
    except ValueError:
        return "request body must be a JSON object"
    return value if isinstance(value, dict) else "request body must be a JSON object"


#: Types of the create fields this emulator reads or the SDK sends (others are ignored, as E2B does).
_CREATE_TYPES: dict[str, tuple[type, ...]] = {
    "autoPause": (bool,),
    "autoPauseMemory": (bool,),
    "autoResume": (dict,),
    "secure": (bool,),
    "allow_internet_access": (bool,),
    "network": (dict,),
    "mcp": (dict, type(None)),
    "iam": (dict,),
    "volumeMounts": (list,),
}
_NETWORK_LISTS = {"allowOut": str, "denyOut": str, "dnsServers": str, "httpsPorts": int}
_TYPE_NAMES = {bool: "a boolean", dict: "an object", list: "an array", type(None): "null", str: "a string"}


def _kind(value: Any) -> str:
    return {
        bool: "boolean",
        int: "number",
        float: "number",
        str: "string",
        list: "array",
        dict: "object",
    }.get(type(value), "null" if value is None else type(value).__name__)


def _create_field_error(req: dict[str, Any]) -> str | None:
    """The first create field whose JSON type is wrong, named with what it must be."""
    for name, types in _CREATE_TYPES.items():
        if name in req and not isinstance(req[name], types):
            want = " or ".join(_TYPE_NAMES[t] for t in types)
            return f"{name} must be {want}, got {_kind(req[name])} {json.dumps(req[name])[:80]}"
    network = req.get("network") or {}
    for name, item in _NETWORK_LISTS.items():
        value = network.get(name)
        if value is None:
            continue
        if not isinstance(value, list) or not all(
            isinstance(v, item) and not isinstance(v, bool) for v in value
        ):
            kind = "strings" if item is str else "integers"
            return f"network.{name} must be an array of {kind}, got {json.dumps(value)[:80]}"
    public = network.get("allowPublicTraffic")
    if public is not None and not isinstance(public, bool):
        return f"network.allowPublicTraffic must be a boolean, got {json.dumps(public)[:80]}"
    return None


def _timeout(value: Any, default: int) -> int | str:
    """A valid lifetime in seconds, or the error message."""
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_TIMEOUT_S:
        return f"timeout must be an integer number of seconds between 0 and {MAX_TIMEOUT_S}, got {value!r}"
    return value


def _str_map(value: Any, name: str) -> dict[str, str] | str:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        return f"{name} must be an object of string values"
    return dict(value)


class ControlPlane:
    """The REST routes, over a :class:`Registry`."""

    def __init__(self, registry: Registry, limits: Limits | None = None) -> None:
        self.registry = registry
        self.limits = limits or Limits()
        self._idempotent: dict[str, str] = {}  # Idempotency-Key -> the sandbox that key created
        self._creating: dict[str, asyncio.Lock] = {}  # Idempotency-Key -> held while it creates
        self._waiting: dict[str, int] = {}  # Idempotency-Key -> requests holding or awaiting its lock

    async def handle(
        self, method: str, path: str, query: str, body: bytes, headers: Mapping[str, str] | None = None
    ) -> tuple[Answer, str | None]:
        """Answer one authenticated REST request; also return the sandbox id it concerned."""
        parts = [p for p in path.split("/") if p]
        if parts[:1] == ["v2"]:
            parts = parts[1:]
        if parts[:1] != ["sandboxes"]:
            return error(404, f"no such route: {method} {path}"), None
        if len(parts) == 1:
            if method == "POST":
                return await self.create(body, (headers or {}).get("idempotency-key"))
            if method == "GET":
                return self.list(query), None
            return error(405, f"method {method} not allowed on {path}"), None
        sandbox_id = parts[1]
        action = parts[2] if len(parts) == 3 else None
        if len(parts) > 3:
            return error(404, f"no such route: {method} {path}"), sandbox_id
        sbx = self.registry.get(sandbox_id)
        if action is None and method == "DELETE":
            return (
                answer(204) if await self.registry.kill(sandbox_id) else _not_found(sandbox_id)
            ), sandbox_id
        if sbx is None:
            return _not_found(sandbox_id), sandbox_id
        if action is None and method == "GET":
            return answer(200, sbx.detail()), sandbox_id
        if action == "timeout" and method == "POST":
            return self.set_timeout(sbx, body), sandbox_id
        if action in ("connect", "resume") and method == "POST":
            return self.connect(sbx, body), sandbox_id
        if action == "pause" and method == "POST":
            return error(400, "pausing is not supported by the local emulator; use kill"), sandbox_id
        return error(404, f"no such route: {method} {path}"), sandbox_id

    async def create(self, body: bytes, idempotency_key: str | None = None) -> tuple[Answer, str | None]:
        """``POST /v2/sandboxes``; a repeated ``Idempotency-Key`` returns the sandbox it already made."""
        if not idempotency_key:
            return await self._create(body, None)
        # a start takes a while off the loop: a retry with the same key waits for the first
        lock = self._creating.setdefault(idempotency_key, asyncio.Lock())
        self._waiting[idempotency_key] = self._waiting.get(idempotency_key, 0) + 1
        try:
            async with lock:
                return await self._create(body, idempotency_key)
        finally:
            self._waiting[idempotency_key] -= 1
            if not self._waiting[idempotency_key]:
                del self._waiting[idempotency_key], self._creating[idempotency_key]

    async def _create(self, body: bytes, idempotency_key: str | None) -> tuple[Answer, str | None]:
        if idempotency_key:
            earlier = self.registry.get(self._idempotent.get(idempotency_key))
            if earlier is not None:
                return answer(201, earlier.created()), earlier.sandbox_id
        req = _json_body(body, self.limits.json_depth)
        if isinstance(req, str):
            return error(400, req), None
        template = req.get("templateID")
        if not isinstance(template, str) or not template:
            return error(400, "templateID is required, e.g. 'base'"), None
        wrong = _create_field_error(req)
        if wrong is not None:
            return error(400, wrong), None
        timeout = _timeout(req.get("timeout"), DEFAULT_TIMEOUT_S)
        metadata = _str_map(req.get("metadata"), "metadata")
        envs = _str_map(req.get("envVars"), "envVars")
        for checked in (timeout, metadata, envs):
            if isinstance(checked, str):
                return error(400, checked), None
        # types were checked above: only a real false (or a deny-all rule) turns the network off
        network = req.get("network") or {}
        deny = network.get("denyOut") or []
        allow_internet = req.get("allow_internet_access") is not False and "0.0.0.0/0" not in deny
        try:
            sbx = await self.registry.create(template, int(timeout), metadata, envs, allow_internet)  # type: ignore[arg-type]
        except Exception as exc:  # the isolation layer failed: an E2B-style 500, never a traceback
            return error(500, f"could not start a sandbox: {type(exc).__name__}: {exc}"), None
        if idempotency_key:
            self._idempotent = {k: v for k, v in self._idempotent.items() if self.registry.get(v) is not None}
            self._idempotent[idempotency_key] = sbx.sandbox_id
        return answer(201, sbx.created()), sbx.sandbox_id

    def set_timeout(self, sbx: Sandbox, body: bytes) -> Answer:
        """``POST /sandboxes/{id}/timeout``: the sandbox now ends N seconds from now."""
        req = _json_body(body, self.limits.json_depth)
        if isinstance(req, str):
            return error(400, req)
        timeout = _timeout(req.get("timeout"), -1)
        if isinstance(timeout, str) or timeout < 0:
            return error(400, timeout if isinstance(timeout, str) else "timeout is required")
        self.registry.set_timeout(sbx, timeout)
        return answer(204)

    def connect(self, sbx: Sandbox, body: bytes) -> Answer:
        """``POST /v2/sandboxes/{id}/connect``: a running sandbox's lifetime is only extended."""
        req = _json_body(body, self.limits.json_depth)
        if isinstance(req, str):
            return error(400, req)
        timeout = _timeout(req.get("timeout"), DEFAULT_TIMEOUT_S)
        if isinstance(timeout, str):
            return error(400, timeout)
        remaining = (sbx.end_at - dt.datetime.now(dt.UTC)).total_seconds()
        if timeout > remaining:
            self.registry.set_timeout(sbx, timeout)
        return answer(200, sbx.created())

    def list(self, query: str) -> Answer:
        """``GET /v2/sandboxes``: metadata and state filters, ``limit``, ``nextToken`` / ``x-next-token``."""
        params = dict(parse_qsl(query, keep_blank_values=True))
        # The SDK quotes each key and value, then url-encodes the pairs (and the query encodes
        # that string once more); E2B's API undoes the inner quoting with QueryUnescape.
        wanted_meta = {
            unquote_plus(k): unquote_plus(v)
            for k, v in parse_qsl(params.get("metadata", ""), keep_blank_values=True)
        }
        states = [s for s in params.get("state", "running,paused").split(",") if s]
        unknown = [s for s in states if s not in ("running", "paused")]
        if unknown:
            return error(400, f"state must be 'running' or 'paused', got {unknown[0]!r}")
        try:
            limit = int(params.get("limit") or LIST_LIMIT_MAX)
        except ValueError:
            return error(400, f"limit must be an integer, got {params['limit']!r}")
        if not 1 <= limit <= LIST_LIMIT_MAX:
            return error(400, f"limit must be between 1 and {LIST_LIMIT_MAX}, got {limit}")
        order = params.get("order") or "asc"
        if order not in ("asc", "desc"):
            return error(400, f"order must be 'asc' or 'desc', got {order!r}")
        after = _started_after(params.get("startedAfter"))
        if isinstance(after, str):
            return error(400, after)
        rows = [
            s
            for s in self.registry.running()
            if "running" in states
            and all(s.metadata.get(k) == v for k, v in wanted_meta.items())
            and (not params.get("template") or params["template"] == s.template_id)
            and (after is None or s.started_at > after)
        ]
        rows.sort(key=lambda s: (s.started_at, s.sandbox_id), reverse=order == "desc")
        token = params.get("nextToken")
        if token:
            cursor = _decode_token(token)
            if cursor is None:
                return error(400, f"nextToken {token!r} is not a token this server issued")
            keys = [(s.started_at.isoformat(), s.sandbox_id) for s in rows]
            rows = [
                s for s, k in zip(rows, keys, strict=True) if (k > cursor if order != "desc" else k < cursor)
            ]
        page, more = rows[:limit], len(rows) > limit
        headers = []
        if more:
            last = page[-1]
            headers.append((b"x-next-token", _encode_token(last.started_at.isoformat(), last.sandbox_id)))
        return answer(200, [s.listed() for s in page], headers)


def _started_after(raw: str | None) -> dt.datetime | str | None:
    """The ``startedAfter`` bound as an aware datetime, None when absent, or the error message."""
    if not raw:
        return None
    try:
        value = dt.datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        return f"startedAfter must be an ISO-8601 time, got {raw!r}"
    return value if value.tzinfo else value.replace(tzinfo=dt.UTC)


def _encode_token(started: str, sandbox_id: str) -> bytes:
    return base64.urlsafe_b64encode(f"{started}|{sandbox_id}".encode())


def _decode_token(token: str) -> tuple[str, str] | None:
    try:
        started, _, sandbox_id = base64.urlsafe_b64decode(token.encode()).decode().partition("|")
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return None
    return (started, sandbox_id) if sandbox_id else None
