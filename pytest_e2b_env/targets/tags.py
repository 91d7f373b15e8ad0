"""The metadata every sandbox of this tool carries, and the one sweep by it.

Every sandbox our code creates is tagged ``{"pytest_e2b_env_run": <run id>, "role": ...}`` (plus
``pool`` for reward workers, ``episode`` for episode sandboxes) by :func:`tags`. Listing by those
tags, killing and confirming each sandbox gone, and reading "which sandboxes were created" from a
target's ledger are written here once; reap, the reward pool, the episode environment, the plugin's
fixtures, the catalog's target sweep, the smokes and training all call these.

"Gone" means the control plane says so: a 404 (``NotFound``) answering the kill or the
``get_info`` after it is a confirmed kill; anything else is retried, then reported unresolved.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

#: Metadata key holding the run id; ``reap`` and every sweep look for it.
RUN_KEY = "pytest_e2b_env_run"
#: Metadata key saying what a sandbox is for (``reward-worker``, ``policy``, ``verifier``, ``test``...).
ROLE_KEY = "role"
#: Reward workers: the pool that owns them (pools may share a run id, as xdist workers do).
POOL_KEY = "pool"
#: Episode sandboxes: the episode that owns them.
EPISODE_KEY = "episode"
#: Bound on every list/kill/get_info call: a cleanup must not hang on an unreachable API.
REQUEST_TIMEOUT = 30.0


class HasRunId(Protocol):
    """Anything that knows the run id (``TargetSettings``, an opened ``Target``)."""

    @property
    def run_id(self) -> str: ...


def tags(settings: HasRunId | str, role: str, **extra: str) -> dict[str, str]:
    """The metadata of one sandbox: run id, role and any ``extra`` keys (``pool=``, ``episode=``)."""
    run_id = settings if isinstance(settings, str) else settings.run_id
    return {RUN_KEY: str(run_id), ROLE_KEY: role, **{key: str(value) for key, value in extra.items()}}


def run_of(metadata: Mapping[str, Any] | None) -> str | None:
    """The run id a sandbox's metadata carries, or None for a sandbox that is not ours."""
    value = (metadata or {}).get(RUN_KEY)
    return None if value is None else str(value)


def _opts(sdk_opts: Mapping[str, Any]) -> dict[str, Any]:
    # debug=False: with E2B_DEBUG=true in the environment the SDK turns kill() into a no-op that
    # returns True, which would make a sweep report sandboxes killed that still run.
    return {"debug": False, "request_timeout": REQUEST_TIMEOUT, **sdk_opts}


def list_tagged(sdk_opts: Mapping[str, Any], metadata: Mapping[str, str] | None = None) -> list[Any]:
    """Every running or paused sandbox of this tool whose metadata holds all of ``metadata``.

    Returns ``e2b.SandboxInfo`` objects, every page of the listing, each sandbox once. The run key
    and the pairs are checked here as well as by the server, since "every run" needs "has the
    key", which the API cannot express.
    """
    from e2b import Sandbox, SandboxQuery, SandboxState

    wanted = dict(metadata or {})
    query = SandboxQuery(metadata=wanted or None, state=[SandboxState.RUNNING, SandboxState.PAUSED])
    paginator = Sandbox.list(query=query, limit=100, **_opts(sdk_opts))
    found: list[Any] = []
    seen: set[str] = set()
    while paginator.has_next:
        for info in paginator.next_items():
            meta = info.metadata or {}
            if RUN_KEY not in meta or info.sandbox_id in seen:
                continue
            if any(meta.get(key) != value for key, value in wanted.items()):
                continue
            seen.add(info.sandbox_id)
            found.append(info)
    return found


def list_ids(sdk_opts: Mapping[str, Any], metadata: Mapping[str, str] | None = None) -> list[str]:
    """Ids of :func:`list_tagged`, in listing order."""
    return [info.sandbox_id for info in list_tagged(sdk_opts, metadata)]


def utc_now() -> str:
    """ISO-8601 UTC timestamp with milliseconds (the cleanup records' clock)."""
    return datetime.now(UTC).isoformat(timespec="milliseconds")


@dataclass(frozen=True)
class Kill:
    """What one kill-and-confirm found: ``confirmed`` gone (at ``at``), or unresolved with ``error``."""

    sandbox_id: str
    confirmed: bool
    killed: bool = False
    error: str | None = None
    at: str | None = None

    def record(self) -> dict[str, Any]:
        """The cleanup record: ``confirmed_absent_at`` when gone, else the ``error``."""
        if self.confirmed:
            return {"sandbox_id": self.sandbox_id, "confirmed_absent_at": self.at}
        return {"sandbox_id": self.sandbox_id, "error": self.error or "not confirmed gone"}


def kill_and_confirm(
    sandbox_id: str,
    sdk_opts: Mapping[str, Any],
    *,
    attempts: int = 3,
    confirm_seconds: float = 0.0,
    poll: float = 0.25,
) -> Kill:
    """Kill one sandbox and confirm it gone with ``get_info``; retried ``attempts`` times.

    After a kill, ``get_info`` is asked until it answers not found or ``confirm_seconds`` pass
    (live E2B may show a killed sandbox for a moment). A failure is kept as the last error.
    """
    from e2b import Sandbox
    from e2b.exceptions import NotFoundException

    opts = _opts(sdk_opts)
    killed = False
    error = "not confirmed gone"
    for attempt in range(attempts):
        try:
            if not Sandbox.kill(sandbox_id, **opts):  # the SDK's answer to a 404: already gone
                return Kill(sandbox_id, True, killed, None, utc_now())
            killed = True
        except NotFoundException:
            return Kill(sandbox_id, True, killed, None, utc_now())
        except Exception as exc:  # any SDK or transport failure leaves it unresolved, for now
            error = f"kill failed: {type(exc).__name__}: {exc}"
        else:
            deadline = time.monotonic() + confirm_seconds
            while True:
                try:
                    info = Sandbox.get_info(sandbox_id, **opts)
                except NotFoundException:
                    return Kill(sandbox_id, True, killed, None, utc_now())
                except Exception as exc:
                    error = f"could not confirm: {type(exc).__name__}: {exc}"
                    break
                if time.monotonic() >= deadline:
                    state = getattr(info.state, "value", info.state)
                    error = f"still present (state {state}) {confirm_seconds:.0f} s after kill"
                    break
                time.sleep(poll)
        if attempt + 1 < attempts:  # back off before the next try; none after the last one
            time.sleep(0.1 * (attempt + 1))
    return Kill(sandbox_id, False, killed, error)


def kill_all(ids: Iterable[str], sdk_opts: Mapping[str, Any], **kill_options: Any) -> list[Kill]:
    """:func:`kill_and_confirm` for each id (eight at a time), sorted by id."""
    unique = sorted(set(ids))
    if not unique:
        return []
    with ThreadPoolExecutor(max_workers=min(8, len(unique)), thread_name_prefix="e2b-sweep") as pool:
        return list(pool.map(lambda sid: kill_and_confirm(sid, sdk_opts, **kill_options), unique))


def sweep(sdk_opts: Mapping[str, Any], metadata: Mapping[str, str], **kill_options: Any) -> list[Kill]:
    """Kill and confirm gone every sandbox tagged with ``metadata`` (which must name the run)."""
    if RUN_KEY not in metadata:
        raise ValueError(f"a sweep needs the run id: metadata={dict(metadata)!r} has no {RUN_KEY!r}")
    return kill_all(list_ids(sdk_opts, metadata), sdk_opts, **kill_options)


def unresolved(kills: Sequence[Kill]) -> list[str]:
    """Ids of the kills that were not confirmed."""
    return [k.sandbox_id for k in kills if not k.confirmed]


def created_entries(
    entries: Iterable[Mapping[str, Any]], start: int | None = None, end: int | None = None
) -> dict[str, Mapping[str, Any]]:
    """The first ``create`` entry of each sandbox in a target's ledger, in creation order.

    ``start <= seq < end`` narrows it (either bound may be None). Any create entry that names a
    sandbox counts, whatever its status or the sandbox's metadata: a create whose answer was lost
    still made a sandbox someone must remove.
    """
    found: dict[str, Mapping[str, Any]] = {}
    for entry in entries:
        seq = entry.get("seq")
        if start is not None and (seq is None or seq < start):
            continue
        if end is not None and (seq is None or seq >= end):
            continue
        sandbox_id = entry.get("sandbox_id")
        if entry.get("op") == "create" and sandbox_id and str(sandbox_id) not in found:
            found[str(sandbox_id)] = entry
    return found


def created_ids(
    entries: Iterable[Mapping[str, Any]], start: int | None = None, end: int | None = None
) -> list[str]:
    """Ids of the sandboxes a target's ledger recorded as created (once each, in order)."""
    return list(created_entries(entries, start, end))


def used_ids(entries: Iterable[Mapping[str, Any]]) -> set[str]:
    """Sandboxes some request other than their create concerned (someone had their id)."""
    return {str(e["sandbox_id"]) for e in entries if e.get("sandbox_id") and e.get("op") != "create"}
