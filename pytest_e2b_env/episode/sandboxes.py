"""Sandbox plumbing for episodes, through the real (sync) e2b SDK.

Every sandbox is created with run-id metadata, a role, an episode tag and a server-side lifetime,
so a sweep by run id (and episode) finds what a lost response left behind. SDK settings are passed
explicitly on every call: library code never mutates ``os.environ``.
"""

from __future__ import annotations

import base64
import re
import shlex
import time
from dataclasses import dataclass
from typing import Any

from pytest_e2b_env.errors import CleanupError
from pytest_e2b_env.settings import TargetSettings
from pytest_e2b_env.targets.tags import (
    EPISODE_KEY,
    RUN_KEY,
    kill_and_confirm,
    list_ids,
    tags,
    unresolved,
)

#: Extra seconds of server-side lifetime beyond the deadline a sandbox is created for.
LIFETIME_SLACK = 30
#: Longest lifetime requested (E2B's Hobby tier caps sandboxes at one hour).
MAX_LIFETIME = 3600


def _sdk() -> Any:
    import e2b  # lazy: the SDK is only needed once an episode starts

    return e2b


def create_sandbox(
    target: TargetSettings, *, role: str, episode: str, lifetime: float, internet: bool = False
) -> Any:
    """Create a tagged sandbox that dies on its own after ``lifetime`` (+ slack) seconds."""
    e2b = _sdk()
    return e2b.Sandbox.create(
        template=target.template,
        timeout=min(int(lifetime) + LIFETIME_SLACK, MAX_LIFETIME),
        metadata=tags(target, role, episode=episode),
        allow_internet_access=internet,
        **target.sdk_opts(),
    )


def confirm_gone(target: TargetSettings, ids: list[str], *, attempts: int = 3) -> list[dict[str, Any]]:
    """Kill each sandbox and confirm it absent (``get_info`` -> not found), with bounded retries.

    Returns one cleanup record per id. Raises :class:`CleanupError` naming every id that could not
    be confirmed gone (the caller keeps owning them).
    """
    kills = [kill_and_confirm(sandbox_id, target.sdk_opts(), attempts=attempts) for sandbox_id in ids]
    stuck = unresolved(kills)
    if stuck:
        raise CleanupError(f"could not confirm {len(stuck)} sandbox(es) gone", stuck)
    return [kill.record() for kill in kills]


def sweep(target: TargetSettings, episode: str | None = None) -> list[str]:
    """Ids of live sandboxes tagged with this run (and ``episode`` when given)."""
    wanted = {RUN_KEY: target.run_id, **({EPISODE_KEY: episode} if episode is not None else {})}
    return list_ids(target.sdk_opts(), wanted)


@dataclass
class CommandOutcome:
    """A finished command: exit code, bounded output, whether more was printed, whether the deadline hit."""

    exit_code: int
    output: str
    truncated: bool
    timed_out: bool


_MARK = re.compile(r"E2BENV rc=(\w+)")
#: Where a command's output lands inside the sandbox (its private /tmp) before the host reads a prefix.
_OUT = "/tmp/.pytest_e2b_env_out"
#: Scratch copy of the exported artifact inside the policy sandbox.
_ART = "/tmp/.pytest_e2b_env_artifact"
#: Seconds any read-back step may take; a candidate that swaps a file for a FIFO only stalls this long.
_READ_SECONDS = 3
#: Seconds an SDK deadline allows past the most its wrapper can take inside the sandbox (the
#: round trip, a busy sandbox's scheduling). A backstop only: the wrapper's own ``timeout`` ends
#: a candidate's command first, and a hung request is masked this much later, not a minute later.
_SDK_SLACK = 5


def _status(stderr: str | None) -> str:
    found = _MARK.findall(stderr or "")
    if not found:
        raise RuntimeError("command wrapper printed no status line")
    return str(found[-1])


def run_bounded(
    sandbox: Any, command: str, *, cwd: str, seconds: float, output_bytes: int, merge_stderr: bool
) -> CommandOutcome:
    """Run ``command`` with ``sh -c`` in ``cwd``, SIGKILLed (with its process group) after ``seconds``.

    Output goes to a file inside the sandbox and only its first ``output_bytes`` come back, so a
    flood never reaches the host. The read-back runs under its own short ``timeout`` inside the
    same wrapper: whatever the candidate does to that file (a FIFO, a link to /dev/zero) costs it
    seconds, never an infrastructure error. The wrapper always exits 0 and reports the real exit
    code on stderr; an SDK exception therefore means the infrastructure failed, not the command.
    """
    quoted = shlex.quote(command)
    err = "&1" if merge_stderr else "/dev/null"
    limit = max(0.1, round(seconds, 1))  # GNU timeout takes fractions: a short window stays short
    script = (
        f"timeout -s KILL {limit} sh -c {quoted} >{_OUT} 2>{err} </dev/null; rc=$?; "
        f"timeout -s KILL {_READ_SECONDS} head -c {int(output_bytes) + 1} {_OUT} 2>/dev/null; "
        'printf "E2BENV rc=%s\\n" "$rc" >&2'
    )
    started = time.monotonic()
    try:
        # The SDK deadline is a backstop only: `timeout` inside the sandbox fires first.
        result = sandbox.commands.run(script, cwd=cwd, timeout=int(limit) + _READ_SECONDS + _SDK_SLACK)
    except _sdk().CommandExitException as exc:
        # The sandbox answered: the command killed its own wrapper (kill -9 -1 and the like).
        # That is the candidate's doing, so it is an outcome, not an infrastructure failure.
        return CommandOutcome(exc.exit_code or 137, "", truncated=False, timed_out=False)
    elapsed = time.monotonic() - started
    rc = int(_status(result.stderr))
    raw = (result.stdout or "").encode("utf-8", "replace")
    output = raw[:output_bytes].decode("utf-8", "replace")
    timed_out = rc == 137 and elapsed >= limit
    return CommandOutcome(rc, output, truncated=len(raw) > output_bytes, timed_out=timed_out)


def export_file(sandbox: Any, path: str, cap: int) -> bytes | None:
    """The bytes of ``path`` if it is a regular file (not a link) of at most ``cap`` bytes, else None.

    Copied and encoded inside the sandbox under short timeouts, so a FIFO, a device link or a file
    swapped by a background process scores 0 instead of hanging the export.
    """
    q = shlex.quote(path)
    t = f"timeout -s KILL {_READ_SECONDS}"
    script = (
        f"if [ -f {q} ] && [ ! -L {q} ]; then "
        f"{t} head -c {int(cap) + 1} -- {q} >{_ART} && {t} base64 -w0 {_ART}; rc=$?; "
        'else rc=absent; fi; printf "E2BENV rc=%s\\n" "$rc" >&2'
    )
    result = sandbox.commands.run(script, timeout=2 * _READ_SECONDS + _SDK_SLACK)
    if _status(result.stderr) != "0":
        return None
    try:
        data = base64.b64decode((result.stdout or "").strip(), validate=True)
    except ValueError:
        return None
    return data if len(data) <= cap else None
