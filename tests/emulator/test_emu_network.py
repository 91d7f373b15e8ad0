"""Network of internet sandboxes: outbound access, but neither the host's loopback nor other sandboxes."""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import textwrap
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest
from emu_helpers import children_named, eventually

from pytest_e2b_env.emulator import Emulator

pytestmark = pytest.mark.namespaces


def _probe(targets: list[tuple[str, int]]) -> str:
    """A Python one-off that tries each target and prints one result line per target."""
    return (
        "python3 -c '"
        + textwrap.dedent(f"""
        import socket
        for addr in {json.dumps(targets)}:
            s = socket.socket(); s.settimeout(5)
            try:
                s.connect(tuple(addr)); print("connected")
            except OSError as exc:
                print(type(exc).__name__)
    """)
        + "'"
    )


@pytest.fixture
def host_listener() -> Iterator[socket.socket]:
    """A listener on the host's 127.0.0.1 (a trainer's local service), non-blocking."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.setblocking(False)
    yield listener
    listener.close()


@pytest.fixture
def online(opts: dict[str, str], needs_namespaces: None) -> Iterator[Any]:
    """A sandbox with the SDK's default internet access, killed after the test."""
    from e2b import Sandbox

    sandbox = Sandbox.create(timeout=120, **opts)
    yield sandbox
    sandbox.kill()


def test_internet_sandbox_does_not_see_the_host_loopback(
    online: Any, host_listener: socket.socket, emu: Emulator
) -> None:
    """The host's 127.0.0.1 listeners (the emulator's own port too) are out of reach, even as root."""
    port = host_listener.getsockname()[1]
    emu_port = urlsplit(emu.url).port
    assert emu_port is not None
    targets = [("127.0.0.1", port), ("10.0.2.2", port), ("127.0.0.1", emu_port), ("0.0.0.0", port)]
    out = online.commands.run(_probe(targets), user="root", timeout=60).stdout.split()
    assert "connected" not in out
    assert len(out) == len(targets)
    with pytest.raises(BlockingIOError):
        host_listener.accept()  # checked from the host: nothing arrived


def test_sandbox_root_has_no_network_privilege(online: Any) -> None:
    """Sandbox root cannot open raw or packet sockets, nor change routes or network sysctls."""
    script = textwrap.dedent("""
        import socket
        for family, kind in ((socket.AF_PACKET, socket.SOCK_RAW), (socket.AF_INET, socket.SOCK_RAW)):
            try:
                socket.socket(family, kind, 255 if family == socket.AF_INET else 0); print("opened")
            except PermissionError:
                print("denied")
    """)
    result = online.commands.run(
        f"python3 -c '{script}'; "
        "ip route add 127.0.0.0/8 dev eth0 2>/dev/null && echo routed || echo no-route; "
        "echo 1 2>/dev/null > /proc/sys/net/ipv4/conf/all/route_localnet && echo set || echo no-sysctl",
        user="root",
        timeout=60,
    )
    assert result.stdout.split() == ["denied", "denied", "no-route", "no-sysctl"]


def test_internet_sandboxes_do_not_reach_each_other(opts: dict[str, str], online: Any) -> None:
    """A service in one sandbox is unreachable from another (loopback, own address, gateway alias)."""
    from e2b import Sandbox

    port = random.randrange(20000, 30000)
    listen = (
        f's=socket.socket(); s.bind(("0.0.0.0", {port})); s.listen(); open("/tmp/up", "w"); time.sleep(60)'
    )
    server = online.commands.run(f"python3 -c 'import socket, time; {listen}'", background=True, user="root")
    try:
        eventually(lambda: online.files.exists("/tmp/up"), within=30, what="the first sandbox's listener")
        other = Sandbox.create(timeout=120, **opts)
        try:
            address = online.commands.run("hostname -I").stdout.split()[0]
            targets = [("127.0.0.1", port), (address, port), ("10.0.2.2", port)]
            out = other.commands.run(_probe(targets), user="root", timeout=60).stdout.split()
        finally:
            other.kill()
        assert "connected" not in out
        assert len(out) == len(targets)
    finally:
        server.kill()


def test_internet_sandbox_has_a_way_out(online: Any) -> None:
    """An internet sandbox has a default route through its own tap device (slirp4netns).

    Read from the sandbox's kernel state, not dialled: test traffic never leaves this machine.
    """
    routes = online.commands.run("cat /proc/net/route").stdout.splitlines()[1:]
    defaults = [line.split() for line in routes if line.split()[1] == "00000000"]
    assert defaults, routes
    assert defaults[0][0] != "lo"
    links = online.commands.run("cat /proc/net/dev").stdout
    assert defaults[0][0] + ":" in links


@pytest.mark.full
def test_network_helpers_end_with_their_sandbox_and_with_the_emulator(needs_namespaces: None) -> None:
    """slirp4netns of a killed sandbox exits at once; the others exit when the emulator is SIGKILLed."""
    from e2b import Sandbox

    with Emulator() as emu:
        assert emu.pid is not None
        first = Sandbox.create(timeout=120, **emu.sdk_opts())
        second = Sandbox.create(timeout=120, **emu.sdk_opts())
        helpers = children_named(emu.pid, "slirp4netns")
        assert len(helpers) == 2
        first.kill()
        eventually(lambda: len(children_named(emu.pid, "slirp4netns")) == 1, what="one helper left")
        assert second.commands.run("echo alive").stdout == "alive\n"
        os.kill(emu.pid, signal.SIGKILL)

        def all_gone() -> bool:
            return not any(os.path.exists(f"/proc/{pid}") and _running(pid) for pid in helpers)

        eventually(all_gone, within=20, what="every slirp4netns gone after the emulator's SIGKILL")


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
