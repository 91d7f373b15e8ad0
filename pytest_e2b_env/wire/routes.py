"""Name a request's route template and sandbox, for the ledger and the fault layer.

Pure functions of method, path and headers, so a forwarding proxy in front of real E2B
classifies requests exactly as the emulator does.
"""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import unquote

#: envd routes whose responses are long-lived streams
STREAM_ROUTES = frozenset(
    {
        "POST /process.Process/Start",
        "POST /process.Process/Connect",
        "POST /filesystem.Filesystem/WatchDir",
        "POST /execute",  # the code interpreter's run_code
    }
)
#: the code-interpreter template's server (``e2b_code_interpreter``'s ``run_code`` and contexts)
JUPYTER_PORT = "49999"


def route_of(method: str, path: str, headers: Mapping[str, str]) -> tuple[str, str | None]:
    """``(template, sandbox_id)``: ``("DELETE /sandboxes/{id}", "i123")`` or envd's fixed paths.

    envd requests carry the sandbox in the ``E2b-Sandbox-Id`` header (lower-cased keys expected);
    control-plane requests carry it as the path segment after ``sandboxes``.
    """
    sandbox_id = headers.get("e2b-sandbox-id")
    if sandbox_id is not None:
        parts = path.split("/")
        if headers.get("e2b-sandbox-port") == JUPYTER_PORT and len(parts) > 2 and parts[1] == "contexts":
            parts[2] = "{id}"  # /contexts/<context id>[/restart]
            path = "/".join(parts)
        return f"{method} {path}", sandbox_id
    parts = path.split("/")
    for i, part in enumerate(parts[:-1]):
        if part == "sandboxes" and parts[i + 1]:
            sandbox_id = unquote(parts[i + 1])
            parts[i + 1] = "{id}"
            break
    return f"{method} {'/'.join(parts)}", sandbox_id


def is_stream(template: str) -> bool:
    """Whether the route answers with a long-lived stream."""
    return template in STREAM_ROUTES
