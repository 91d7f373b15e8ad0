"""The control API's client keeps its connections, and a kept one the server closed costs no call.

A real HTTP/1.1 server on loopback counts the connections it accepted and the requests it served,
and closes idle connections when told to (as the emulator does on its idle timeout or under a
connection flood).
"""

from __future__ import annotations

import http.server
import json
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from emu_helpers import eventually

from pytest_e2b_env.emulator import Emulator
from pytest_e2b_env.emulator.control_client import ControlClient


class _Counting(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.connections = 0
        self.requests: list[tuple[str, str, bytes]] = []
        self.open: list[Any] = []
        self.close_after_answer = False

    def close_idle(self) -> None:
        """Close every connection between requests, as an idle timeout does."""
        for sock in list(self.open):
            sock.shutdown(socket.SHUT_RDWR)


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Counting

    def setup(self) -> None:
        super().setup()
        self.server.connections += 1
        self.server.open.append(self.connection)

    def finish(self) -> None:
        self.server.open.remove(self.connection)
        super().finish()

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        self.server.requests.append((self.command, self.path, body))
        out = json.dumps({"n": len(self.server.requests), "path": self.path}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(out)))
        if self.server.close_after_answer:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(out)

    do_GET = do_POST = _answer

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def server() -> Iterator[_Counting]:
    srv = _Counting()
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield srv
    finally:
        srv.shutdown()
        srv.server_close()
        thread.join(timeout=10)


def _url(srv: _Counting) -> str:
    return f"http://127.0.0.1:{srv.server_address[1]}"


def test_calls_one_after_another_share_one_connection(server: _Counting) -> None:
    client = ControlClient(_url(server))
    answers = [client.request("GET", f"/mark/{i}") for i in range(5)]
    client.close()
    assert [status for status, _ in answers] == [200] * 5
    assert [json.loads(body) for _, body in answers] == [{"n": i + 1, "path": f"/mark/{i}"} for i in range(5)]
    assert server.connections == 1


def test_a_kept_connection_the_server_closed_is_replaced_and_the_call_made_once(server: _Counting) -> None:
    """A POST too: the server never saw the attempt on the closed connection, so nothing runs twice."""
    client = ControlClient(_url(server))
    assert client.request("POST", "/faults", b'{"a": 1}')[0] == 200
    eventually(lambda: len(server.open) == 1, what="the server holds the kept connection")
    server.close_idle()
    eventually(lambda: not server.open, what="the server closed the idle connection")
    status, body = client.request("POST", "/faults", b'{"b": 2}')
    client.close()
    assert (status, json.loads(body)) == (200, {"n": 2, "path": "/faults"})
    assert server.requests == [("POST", "/faults", b'{"a": 1}'), ("POST", "/faults", b'{"b": 2}')]
    assert server.connections == 2


def test_an_answer_that_closes_its_connection_is_not_kept(server: _Counting) -> None:
    server.close_after_answer = True
    client = ControlClient(_url(server))
    for _ in range(3):
        assert client.request("GET", "/info")[0] == 200
    client.close()
    assert server.connections == 3


def test_calls_from_threads_at_once_never_share_a_connection(server: _Counting) -> None:
    """Each caller reads the answer to its own request, never another thread's."""
    client = ControlClient(_url(server))
    wrong: list[str] = []

    def call(name: str) -> None:
        for i in range(20):
            status, body = client.request("GET", f"/{name}/{i}")
            if status != 200 or json.loads(body)["path"] != f"/{name}/{i}":
                wrong.append(f"{name}/{i}: {status} {body!r}")

    threads = [threading.Thread(target=call, args=(f"t{k}",)) for k in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    client.close()
    assert not wrong
    assert len(server.requests) == 80


def test_a_fresh_connection_that_fails_is_an_error_not_a_retry() -> None:
    srv = _Counting()
    url = _url(srv)
    srv.server_close()  # nothing listens there any more
    with pytest.raises(ConnectionRefusedError):
        ControlClient(url).request("GET", "/info")


def test_a_url_that_is_not_http_host_port_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match=r"'https://example\.com' is not http://host:port"):
        ControlClient("https://example.com")


def test_the_emulator_takes_a_rule_once_after_closing_the_idle_connection() -> None:
    """The emulator's own idle timeout closes the kept connection before the rule is sent."""
    with Emulator(limits={"idle_seconds": 0.2}) as emulator:
        emulator.ledger_mark()
        time.sleep(0.6)
        rule = emulator.faults.add(route="POST /sandboxes", answer={"status": 503})
        assert [r["id"] for r in emulator.faults.list()] == [rule]
