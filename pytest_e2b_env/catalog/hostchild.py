"""The case host's own side: the loop a spawned or forked case host runs (``python -m`` this module).

It reads JSON requests from the controller's pipe, runs each against the subject it imported once
(or the subject the template imported before forking it), and writes one JSON reply per request.
Both ways a host starts (:class:`~pytest_e2b_env.catalog.host.CaseHost` spawning it,
:mod:`~pytest_e2b_env.catalog.hostfork` forking it) run exactly this loop.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import sys
from typing import Any

from pytest_e2b_env.catalog.contract import load_subject
from pytest_e2b_env.catalog.model import Case
from pytest_e2b_env.catalog.runner import run_case
from pytest_e2b_env.emulator import Emulator
from pytest_e2b_env.settings import TargetSettings
from pytest_e2b_env.targets import Target

__all__ = ["load_subject", "serve"]


def serve(req_fd: int, rep_fd: int, loaded: tuple[dict[str, Any], Any] | None = None) -> int:
    """Serve requests until ``stop`` or end of input (runs in the host process).

    ``loaded``: (subject spec, subject) a template imported before forking this host.
    """
    reader = os.fdopen(req_fd, "rb")
    writer = os.fdopen(rep_fd, "wb")

    def reply(message: dict[str, Any]) -> None:
        writer.write((json.dumps(message, default=str) + "\n").encode())
        writer.flush()

    target: Any = None
    subject: Any = None
    for raw in reader:
        request = json.loads(raw)
        op = request.get("op")
        try:
            if op == "hello":
                info = request["target"]
                # the emulator, or the fault proxy before live E2B: both serve the control API
                backend = Emulator.connect(info["url"], info["api_key"], info["control_key"])
                target = Target(backend, TargetSettings(mode=info["mode"], run_id=info["run_id"]))
                spec = request["subject"]
                if loaded is not None and loaded[0] == spec:
                    subject = loaded[1]
                else:
                    subject = load_subject(spec["spec"], spec["kind"], spec.get("contract"))
                gc.freeze()  # the subject and its imports live as long as the host: collections skip them
                reply({"ok": True})
            elif op == "warm_up":
                if subject.contract.warm_up is not None:
                    with target.scoped_env(), contextlib.suppress(Exception):
                        subject.contract.warm_up()
                gc.freeze()
                reply({"ok": True})
            elif op == "run":
                case = Case.model_validate(request["case"])
                record = run_case(
                    case,
                    subject,
                    target,
                    extra_tools=list(request.get("extra_tools") or []),
                    relax=frozenset(request.get("relax") or ()),
                )
                # Free the case's unreachable objects before the next case's subject code runs.
                # A cancelled batch leaves SDK tasks in reference cycles, freed by the collector
                # at any allocation of a later case; a failed task's finalizer logs its traceback,
                # which on CPython 3.11 runs ``ast.parse`` on the source line. Nested inside the
                # subject's own ``ast.parse``, that resets the interpreter's one AST depth counter
                # and the subject's parse raises SystemError: a correct candidate scores 0.
                # What survives is frozen, as the imports were: the next collection walks only
                # what the next case makes (a cycle that dies later stays until the host ends).
                gc.collect()
                gc.freeze()
                reply({"ok": True, "record": json.loads(record.to_json())})
            elif op == "stop":
                # What the subject keeps process-wide (servers) releases its sandboxes while the
                # target still answers: the contract's ``release``.
                if subject is not None and subject.contract.release is not None:
                    with contextlib.suppress(Exception):
                        subject.contract.release()
                reply({"ok": True})
                return 0
            else:
                reply({"error": f"unknown request {op!r}"})
        except Exception as exc:  # the request failed in the host, not the subject: say so
            reply({"error": f"case host: {type(exc).__name__}: {exc}"})
    return 0


if __name__ == "__main__":
    sys.exit(serve(int(sys.argv[1]), int(sys.argv[2])))
