"""The fault proxy: the emulator's wire fault layer and ledger in front of any E2B.

Point the e2b SDK at the proxy (``api_url = sandbox_url = proxy.url``); it forwards the
control plane to the upstream API and envd traffic to the upstream sandbox endpoint,
streaming both ways, and applies the same fault rules as the emulator. With real E2B as
the upstream, fault cases of the catalog run live::

    with FaultProxy("https://api.e2b.app", api_key=my_key) as proxy:
        proxy.faults.add(route="DELETE /sandboxes/*", answer={"kill_fails": True})
        sandbox = Sandbox.create(**proxy.sdk_opts())
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import threading
from collections.abc import Mapping
from typing import Any

from pytest_e2b_env.errors import ConfigError, FaultRuleError, InfrastructureError
from pytest_e2b_env.proxy.cap import CreateCap
from pytest_e2b_env.proxy.forward import Forwarder
from pytest_e2b_env.proxy.routing import domain_of_api_url
from pytest_e2b_env.proxy.serve import ThreadedServer
from pytest_e2b_env.settings import DEFAULT_DOMAIN, env_api_key, live_upstream, sdk_env
from pytest_e2b_env.targets.backend import fault_rule_message
from pytest_e2b_env.wire.control import ControlEndpoint
from pytest_e2b_env.wire.faults import FaultMiddleware, FaultPlan, FaultRule
from pytest_e2b_env.wire.ledger import Ledger
from pytest_e2b_env.wire.recording import RecordingMiddleware
from pytest_e2b_env.wire.routes import is_stream, route_of

__all__ = ["DEFAULT_DOMAIN", "FaultProxy", "ProxyFaults"]


class ProxyFaults:
    """``proxy.faults``: add and clear wire fault rules (same call shape as the emulator's)."""

    def __init__(self, plan: FaultPlan) -> None:
        self.plan = plan

    def add(
        self,
        route: str = "*",
        answer: Mapping[str, Any] | None = None,
        times: int | None = 1,
        sandbox: str | None = None,
        contains: str | None = None,
        after: int = 0,
    ) -> str:
        """Add a rule (validated; a bad one raises FaultRuleError naming the field) and return its id."""
        try:
            rule = FaultRule.model_validate(
                {
                    "route": route,
                    "answer": dict(answer or {}),
                    "times": times,
                    "sandbox": sandbox,
                    "contains": contains,
                    "after": after,
                }
            )
        except ValueError as exc:
            raise FaultRuleError(f"{fault_rule_message(exc)} (route {route!r})") from None
        return self.plan.add(rule)

    def clear(self) -> None:
        """Drop every rule."""
        self.plan.clear()

    def rules(self) -> list[dict[str, Any]]:
        """Every rule with its id and its seen/fired counters."""
        return self.plan.rules()

    def list(self) -> list[dict[str, Any]]:
        """The same as :meth:`rules`, under the emulator's name."""
        return self.plan.rules()


class _UpstreamTarget:
    """The fault layer's view of the upstream: classification, and losing a sandbox for real."""

    def __init__(self, proxy: FaultProxy) -> None:
        self.proxy = proxy

    def route_of(self, method: str, path: str, headers: Mapping[str, str]) -> tuple[str, str | None]:
        return route_of(method, path, headers)

    def is_stream(self, template: str) -> bool:
        return is_stream(template)

    async def lose(self, sandbox_id: str) -> None:
        # A real target cannot make a VM vanish; killing it through the API is the closest
        # thing, and afterwards the edge answers exactly as for a lost sandbox (502 not found).
        proxy = self.proxy
        url = f"{proxy.upstream_api_url}/sandboxes/{sandbox_id}"
        try:
            response = await proxy._forwarder.client.delete(url, headers={"X-API-KEY": proxy.api_key})
            detail = f"lost (fault): upstream kill answered {response.status_code}"
        except Exception as exc:  # recorded, not raised: the request still gets its (faulted) answer
            detail = f"lost (fault): upstream kill failed: {type(exc).__name__}"
        # The same entry the emulator writes when it loses a sandbox (op "kill", no request).
        proxy._ledger.record("kill", sandbox_id=sandbox_id, detail=detail)


class FaultProxy:
    """A fault-injecting, recording forward proxy on a free loopback port (context manager).

    ``upstream_api_url`` is the E2B API or an emulator URL (default: ``$PYTEST_E2B_ENV_LIVE_API_URL``,
    else ``https://api.$E2B_DOMAIN``, ``e2b.app`` when unset);
    ``upstream_sandbox_url`` is the envd endpoint when it is fixed (an emulator: its URL);
    leave it ``None`` for real E2B, where each sandbox's domain decides (with no URL given,
    ``$PYTEST_E2B_ENV_LIVE_SANDBOX_URL`` is used when set). ``api_key`` is the
    upstream key, used only to kill a sandbox for a ``lose_sandbox`` fault and handed to the
    SDK by :meth:`sdk_env` / :meth:`sdk_opts` (default: ``$E2B_API_KEY``); it is never logged.
    ``max_creates`` caps the creates forwarded upstream (:mod:`~pytest_e2b_env.proxy.cap`): past it
    a create answers 403 naming the cap, and :attr:`cap` counts what was refused.
    """

    def __init__(
        self,
        upstream_api_url: str | None = None,
        upstream_sandbox_url: str | None = None,
        *,
        api_key: str | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        max_creates: int | None = None,
    ) -> None:
        if upstream_api_url is None:
            # Live default (never E2B_API_URL: see pytest_e2b_env.settings.live_upstream).
            upstream_api_url, fixed_sandbox_url = live_upstream()
            if upstream_sandbox_url is None:
                upstream_sandbox_url = fixed_sandbox_url
        if api_key is None:
            api_key = env_api_key()
        if not upstream_api_url.startswith(("http://", "https://")):
            raise ConfigError(
                f"upstream_api_url={upstream_api_url!r} is not an http(s) URL. Example: https://api.e2b.app"
            )
        if upstream_sandbox_url is None and domain_of_api_url(upstream_api_url) is None:
            raise ConfigError(
                f"upstream_api_url={upstream_api_url!r} has no api.<domain> host, so the sandbox endpoint is "
                "unknown; pass upstream_sandbox_url (for an emulator: its URL)"
            )
        if not api_key:
            raise ConfigError(
                "api_key is empty and E2B_API_KEY is not set; export your E2B API key "
                "(or pass api_key=, e.g. an emulator's api_key)"
            )
        self.upstream_api_url = upstream_api_url.rstrip("/")
        self.upstream_sandbox_url = upstream_sandbox_url.rstrip("/") if upstream_sandbox_url else None
        self.api_key = api_key
        self._domains: dict[str, str] = {}
        self._internet: dict[str, bool] = {}  # from create requests: E2B's list answer lacks it
        self._domains_lock = threading.Lock()
        self._default_domain = domain_of_api_url(self.upstream_api_url)
        self._ledger = Ledger()
        self._plan = FaultPlan()
        self.faults = ProxyFaults(self._plan)
        self._forwarder = Forwarder(
            self.upstream_api_url, sandbox_url=self.upstream_sandbox_url, domain_for=self._domain_for
        )
        # The cap sits behind the fault layer: a create a fault answered never reached the upstream.
        self.cap = CreateCap(self._forwarder, max_creates) if max_creates is not None else None
        recorded = RecordingMiddleware(
            FaultMiddleware(self.cap or self._forwarder, self._plan, _UpstreamTarget(self)),
            self._ledger,
            on_sandbox=self._learn_sandbox,
        )
        # The emulator's control API on the proxy's own random key (never the E2B key), so a case
        # host can read this ledger and set these faults from another process. No kill-all: live,
        # that would be the whole team's sandboxes.
        self.control_key = secrets.token_urlsafe(32)
        app = ControlEndpoint(
            recorded,
            key=self.control_key,
            ledger=self._ledger,
            faults=self._plan,
            info={"isolation": "e2b", "reason": "real E2B behind the fault proxy"},
            sandboxes=self._sandboxes_off_loop,
            rule_error=fault_rule_message,
        )
        self._server = ThreadedServer(app, host=host, port=port, name="fault proxy")
        self._running = False
        self._closed = False

    def __repr__(self) -> str:  # never shows the key
        state = "running" if self._running else "stopped"
        return f"<FaultProxy {self.url} -> {self.upstream_api_url} ({state})>"

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> FaultProxy:
        """Start serving (``with FaultProxy(...)`` does this)."""
        if self._closed:
            raise InfrastructureError("this FaultProxy was closed and cannot restart; make a new one")
        if not self._running:
            self._server.start()
            self._running = True
        return self

    def close(self) -> None:
        """Stop serving and close upstream connections (idempotent). Sandboxes are left as they are."""
        if not self._running:
            return
        self._running = False
        self._closed = True
        # If the loop is already gone, its sockets went with it.
        with contextlib.suppress(InfrastructureError, TimeoutError):
            self._server.call(self._forwarder.aclose, timeout=10)
        self._server.stop()

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- the target contract shared with the emulator ---------------------------------------

    @property
    def isolation(self) -> str:
        """What isolates the sandboxes: the upstream E2B's own (VMs), never the proxy."""
        return "e2b"

    @property
    def pid(self) -> int:
        """The process serving the proxy: this one (it runs in a thread here)."""
        return os.getpid()

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT`` once started: the API URL and the sandbox URL the SDK should use."""
        return self._server.url

    def sdk_env(self) -> dict[str, str]:
        """Environment variables pointing the e2b SDK at the proxy."""
        return sdk_env(self.url, self.api_key)

    def sdk_opts(self) -> dict[str, Any]:
        """Keyword options for ``Sandbox.create(...)`` / ``e2b.E2B(...)`` pointing at the proxy."""
        return {"api_key": self.api_key, "api_url": self.url, "sandbox_url": self.url}

    def ledger_mark(self) -> int:
        """A mark to pass to :meth:`ledger` to see only later entries."""
        return self._ledger.mark()

    def creates_in_flight(self) -> int:
        """Create requests received and not yet answered (their ledger entries are to come)."""
        return self._ledger.creating()

    def ledger(self, since: int = 0) -> list[dict[str, Any]]:
        """Ledger entries since a mark, oldest first, in the emulator's format.

        Each: ``{"seq", "t", "method", "route", "sandbox_id", "status", "op", "detail"}``; a
        faulted request is ``op="fault"`` with the rule in ``detail``; an entry that created a
        sandbox also has ``"allow_internet_access"``; a ``lose_sandbox`` fault
        adds an ``op="kill"`` entry with ``detail`` starting ``"lost (fault)"``.
        """
        return self._ledger.since(since)

    def sandboxes(self, metadata: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
        """Running and paused sandboxes upstream (for leak checks), as ``Emulator.sandboxes()`` rows.

        Asked of the upstream API directly, so it never shows in the ledger or meets a fault.
        On real E2B this sees the whole team: pass ``metadata`` (e.g. the run id) to narrow it.
        """
        from e2b import Sandbox, SandboxQuery, SandboxState

        query = SandboxQuery(
            metadata=dict(metadata) if metadata else None, state=[SandboxState.RUNNING, SandboxState.PAUSED]
        )
        paginator = Sandbox.list(
            query=query, limit=100, api_key=self.api_key, api_url=self.upstream_api_url, debug=False
        )
        rows: list[dict[str, Any]] = []
        while paginator.has_next:
            for info in paginator.next_items():
                rows.append(
                    {
                        "sandbox_id": info.sandbox_id,
                        "template_id": info.template_id,
                        "metadata": dict(info.metadata or {}),
                        "started_at": info.started_at.isoformat(),
                        "end_at": info.end_at.isoformat(),
                        "allow_internet_access": self._internet_of(info),
                        "state": getattr(info.state, "value", info.state),
                    }
                )
        return rows

    async def _sandboxes_off_loop(self) -> list[dict[str, Any]]:
        # the SDK listing is blocking: never on the loop that forwards every other request
        return await asyncio.to_thread(self.sandboxes)

    def _internet_of(self, info: Any) -> bool | None:
        """Internet access of a listed sandbox: the list answer, else its create request, else get_info."""
        if info.allow_internet_access is not None:
            return bool(info.allow_internet_access)
        with self._domains_lock:
            known = self._internet.get(info.sandbox_id)
        if known is not None:
            return known
        # Created elsewhere (not through this proxy): ask once; the setting is fixed at create.
        from e2b import Sandbox

        try:
            detail = Sandbox.get_info(
                info.sandbox_id, api_key=self.api_key, api_url=self.upstream_api_url, debug=False
            )
        except Exception:  # gone meanwhile, or the API is busy: unknown, and asked again next time
            return None
        if detail.allow_internet_access is None:
            return None
        with self._domains_lock:
            self._internet[info.sandbox_id] = bool(detail.allow_internet_access)
        return bool(detail.allow_internet_access)

    # -- sandbox domains (live E2B routes envd traffic by the domain create answered) -------

    def _learn_sandbox(self, sandbox_id: str, domain: str | None, internet: bool | None) -> None:
        with self._domains_lock:
            if domain:
                self._domains[sandbox_id] = domain
            if internet is not None:
                self._internet[sandbox_id] = internet

    def _domain_for(self, sandbox_id: str) -> str | None:
        with self._domains_lock:
            return self._domains.get(sandbox_id, self._default_domain)
