"""The case host's own side: the loop a spawned or forked case host runs (``python -m`` this module).

It reads JSON requests from the controller's pipe and carries each out against the subject it
imported once (or the subject the template imported before forking it): ``hello`` (the target's
SDK settings and the subject), ``warm_up``, the subject calls of a case
(:class:`~pytest_e2b_env.catalog.execute.Executor`), ``stop``. Every answer is one JSON line
carrying the request's id. It never learns a key of the target's control API, reads no ledger and
judges nothing. Both ways a host starts (:class:`~pytest_e2b_env.catalog.host.CaseHost` spawning
it, :mod:`~pytest_e2b_env.catalog.hostfork` forking it) run exactly this loop.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import sys
import threading
from typing import Any

from pytest_e2b_env.catalog import procs, quiet_imports
from pytest_e2b_env.catalog.contract import load_subject
from pytest_e2b_env.catalog.execute import Executor
from pytest_e2b_env.catalog.raw import OPAQUE, dumps
from pytest_e2b_env.errors import ConfigError

__all__ = ["load_subject", "serve"]

#: An answer longer than this goes with its value replaced by a note (the controller's limit is 64 MiB).
ANSWER_LIMIT = 32 * 1024 * 1024


def _bounded(message: dict[str, Any]) -> bytes:
    data = dumps(message)
    if len(data) <= ANSWER_LIMIT:
        return data
    note = f"a value of {len(data)} bytes as JSON, more than the {ANSWER_LIMIT} the host sends"
    return dumps({**message, "value": {OPAQUE: {"type": "too large", "str": note, "repr": note}}})


def serve(req_fd: int, rep_fd: int, loaded: tuple[dict[str, Any], Any] | None = None) -> int:
    """Serve requests until ``stop`` or end of input (runs in the host process).

    ``loaded``: (subject spec, subject) a template imported before forking this host.
    """
    procs.become_subreaper()  # what the subject starts stays in this tree, daemons included
    quiet_imports.install()  # a spawned host imports the subject itself: skip gradio's stub rewriting
    reader = os.fdopen(req_fd, "rb")
    writer = os.fdopen(rep_fd, "wb")
    lock = threading.Lock()

    def reply(message: dict[str, Any]) -> None:
        data = _bounded(message)
        with lock:
            writer.write(data)
            writer.flush()

    subject: Any = None
    executor: Executor | None = None
    for raw in reader:
        request = json.loads(raw)
        op, call_id = request.get("op"), request.get("id")
        try:
            if op == "hello":
                # The SDK's settings for the target, for the host's whole life; nothing else of it.
                os.environ.update(request["sdk_env"])
                if request.get("marker"):  # a forked host: its own mark, for what its subject starts
                    os.environ[procs.MARKER] = str(request["marker"])
                spec = request["subject"]
                if loaded is not None and loaded[0] == spec:
                    subject = loaded[1]
                else:
                    subject = load_subject(spec["spec"], spec["kind"], spec.get("contract"))
                executor = Executor(subject, reply)
                gc.freeze()  # the subject and its imports live as long as the host: collections skip them
                reply({"id": call_id, "ok": True, "contract": subject.contract.facts()})
            elif op == "warm_up":
                if subject.contract.warm_up is not None:
                    with contextlib.suppress(Exception):
                        subject.contract.warm_up()
                gc.freeze()
                reply({"id": call_id, "ok": True})
            elif op == "stop":
                # What the subject keeps process-wide (servers) releases its sandboxes while the
                # target still answers: the contract's ``release``. Then what it started ends.
                if subject is not None and subject.contract.release is not None:
                    with contextlib.suppress(Exception):
                        subject.contract.release()
                with contextlib.suppress(Exception):
                    procs.kill_tree(os.getpid())
                reply({"id": call_id, "ok": True})
                return 0
            elif executor is None:
                reply({"id": call_id, "error": f"request {op!r} before hello"})
            else:
                executor.handle(request)
                if op == "end":
                    # Free the case's unreachable objects before the next case's subject code runs.
                    # A cancelled batch leaves SDK tasks in reference cycles, freed by the collector
                    # at any allocation of a later case; a failed task's finalizer logs its
                    # traceback, which on CPython 3.11 runs ``ast.parse`` on the source line. Nested
                    # inside the subject's own ``ast.parse``, that resets the interpreter's one AST
                    # depth counter and the subject's parse raises SystemError: a correct candidate
                    # scores 0. What survives is frozen, as the imports were: the next collection
                    # walks only what the next case makes.
                    gc.collect()
                    gc.freeze()
        except ConfigError as exc:  # the subject could not be imported here
            reply({"id": call_id, "error": str(exc)})
        except Exception as exc:  # the request failed in the host, not the subject: say so
            reply({"id": call_id, "error": f"case host: {type(exc).__name__}: {exc}"})
    return 0


if __name__ == "__main__":
    sys.exit(serve(int(sys.argv[1]), int(sys.argv[2])))
