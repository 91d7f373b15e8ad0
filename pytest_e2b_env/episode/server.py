"""Serving the repair environment: the app factory and a loopback server in a thread.

``create_app()`` builds the OpenEnv FastAPI app (WebSocket sessions, bounded in number);
:class:`LoopbackServer` runs any ASGI app on 127.0.0.1 in a daemon thread; :func:`shared_server`
keeps one such server per environment class per process, shut down at exit.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import functools
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from pytest_e2b_env.errors import ConfigError, InfrastructureError
from pytest_e2b_env.settings import ENV_OPENENV_URL, TargetSettings

#: Default bound on concurrent episode sessions (one per TRL rollout in flight).
MAX_SESSIONS = 16


def create_app(
    env: Callable[..., Any] | None = None,
    *,
    target: TargetSettings | None = None,
    max_sessions: int = MAX_SESSIONS,
) -> Any:
    """The OpenEnv app serving ``env`` (default :class:`RepairEnvironment`), at most ``max_sessions`` at once.

    ``target`` fixes the SDK settings and run id; by default each environment reads them with
    :meth:`TargetSettings.from_env` when it is built.
    """
    from openenv.core.env_server.http_server import create_app as openenv_app

    from pytest_e2b_env.episode.environment import (
        EpisodeAction,
        EpisodeObservation,
        EpisodeState,
        RepairEnvironment,
    )

    if not isinstance(max_sessions, int) or max_sessions < 1:
        raise ConfigError(f"max_sessions={max_sessions!r} must be a positive integer, e.g. 8")
    env_cls = env or RepairEnvironment
    factory = functools.partial(env_cls, target=target) if target is not None else env_cls
    return openenv_app(
        factory,
        EpisodeAction,
        EpisodeObservation,
        env_name="pytest_e2b_env_repair",
        max_concurrent_envs=max_sessions,
        state_cls=EpisodeState,
    )


class LoopbackServer:
    """An ASGI app served by uvicorn on 127.0.0.1 in a daemon thread."""

    def __init__(self, app: Any, port: int = 0) -> None:
        import uvicorn

        config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", ws="websockets-sansio")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, name="episode-openenv", daemon=True)
        self.url = ""

    def start(self, timeout: float = 30.0) -> LoopbackServer:
        """Start serving; returns once the port is bound (``self.url`` is then set)."""
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise InfrastructureError("the OpenEnv loopback server did not start")
            time.sleep(0.01)
        port = self._server.servers[0].sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        return self

    def close(self) -> None:
        """Stop serving; open sessions are closed, which releases their sandboxes."""
        self._server.should_exit = True
        if self._thread.is_alive():
            self._thread.join(timeout=30)

    def __enter__(self) -> LoopbackServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


_SHARED: dict[Any, LoopbackServer] = {}
_SHARED_LOCK = threading.Lock()


def shared_server(env: Callable[..., Any] | None = None, environ: Mapping[str, str] | None = None) -> str:
    """URL of this process's loopback server for ``env`` and the E2B_* settings of ``environ``.

    One server per (environment class, settings): a process that points the SDK at another target
    (a new emulator, another run id) gets a server of its own instead of one still talking to the
    old target. ``environ`` defaults to ``os.environ``.
    """
    target = TargetSettings.from_env(environ)
    key = (env, target)
    with _SHARED_LOCK:
        server = _SHARED.get(key)
        if server is None:
            server = LoopbackServer(create_app(env, target=target)).start()
            if not _SHARED:
                atexit.register(close_shared_servers)
            _SHARED[key] = server
        return server.url


def prestart_shared_server(environ: Mapping[str, str]) -> threading.Thread:
    """Start the reference server (:func:`shared_server`) in a background thread with ``environ``.

    Importing openenv (it imports gradio) and starting uvicorn takes seconds; a caller that knows
    episodes are coming, with which E2B_* settings, pays it while doing other work. The first
    ``reset`` then waits for this start (same lock) instead of starting its own. A failure here
    is not reported: that ``reset`` starts the server again and raises what it meets.
    """
    settings = dict(environ)

    def start() -> None:
        with contextlib.suppress(Exception):
            shared_server(None, settings)

    thread = threading.Thread(target=start, name="episode-openenv-prestart", daemon=True)
    thread.start()
    return thread


def close_shared_servers() -> None:
    """Stop every server :func:`shared_server` started (registered with ``atexit``)."""
    with _SHARED_LOCK:
        servers = list(_SHARED.values())
        _SHARED.clear()
    for server in servers:
        server.close()


def main(argv: list[str] | None = None) -> int:
    """``python -m pytest_e2b_env.episode.server``: serve the repair environment on loopback."""
    parser = argparse.ArgumentParser(prog="pytest_e2b_env.episode.server")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--max-sessions", type=int, default=MAX_SESSIONS)
    args = parser.parse_args(argv)
    server = LoopbackServer(create_app(max_sessions=args.max_sessions), port=args.port).start()
    print(f"{ENV_OPENENV_URL}={server.url}", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        server.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
