"""`pytest-e2b-env reap` on the command line: usage errors, and cleanup after a SIGKILLed host."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Callable
from typing import Any

import pytest

from pytest_e2b_env.cli.reap import main
from pytest_e2b_env.targets.tags import RUN_KEY


def test_live_without_key_is_a_one_line_usage_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """--live without E2B_API_KEY exits 2 with one line naming the variable."""
    monkeypatch.delenv("E2B_API_KEY", raising=False)
    assert main(["--live"]) == 2
    err = capsys.readouterr().err
    expected = "--live needs E2B_API_KEY in the environment; export your E2B API key and retry"
    assert err == f"pytest-e2b-env reap: {expected}\n"


def test_offline_without_url_names_the_flag(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Offline without --api-url or E2B_API_URL exits 2 and names both."""
    monkeypatch.delenv("E2B_API_URL", raising=False)
    monkeypatch.setenv("E2B_API_KEY", "k")
    assert main([]) == 2
    assert "pass --api-url URL or set E2B_API_URL" in capsys.readouterr().err


def test_offline_without_key(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Offline without a key exits 2 and says which emulator needs one."""
    monkeypatch.delenv("E2B_API_KEY", raising=False)
    assert main(["--api-url", "http://127.0.0.1:9"]) == 2
    assert capsys.readouterr().err.startswith("pytest-e2b-env reap: E2B_API_KEY is not set")


def test_run_id_and_older_than_are_exclusive(capsys: pytest.CaptureFixture[str]) -> None:
    """--run-id and --older-than together are an argparse usage error."""
    with pytest.raises(SystemExit) as exit_info:
        main(["--run-id", "r", "--older-than", "5"])
    assert exit_info.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err


def test_wrong_key_fails_in_one_line(
    emulator: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A key the target refuses exits 1 naming the SDK's exception, without printing the key."""
    monkeypatch.setenv("E2B_API_KEY", "e2b_wrong_key_value")
    assert main(["--api-url", emulator.url]) == 1
    err = capsys.readouterr().err
    assert "AuthenticationException" in err
    assert "e2b_wrong_key_value" not in err
    assert err.count("\n") == 1


_CHILD = textwrap.dedent(
    """
    import sys, time
    from e2b import Sandbox
    for _ in range(3):
        Sandbox.create(timeout=600, metadata={"pytest_e2b_env_run": sys.argv[1], "role": "worker"})
    print("created", flush=True)
    time.sleep(600)
    """
)


@pytest.mark.full
def test_reap_cleans_up_after_a_sigkilled_host(
    alive: Callable[[], dict[str, Any]], emulator: Any, run_id: str
) -> None:
    """A host SIGKILLed mid-work leaves tagged sandboxes; `reap --run-id` leaves none."""
    env = {**os.environ, **emulator.sdk_env()}
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD, run_id], env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline() == "created\n"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(30)
        if child.stdout is not None:
            child.stdout.close()
    assert child.returncode == -signal.SIGKILL
    leaked = [s for s in alive().values() if (s["metadata"] or {}).get(RUN_KEY) == run_id]
    assert len(leaked) == 3

    reaped = subprocess.run(
        [sys.executable, "-m", "pytest_e2b_env", "reap", "--run-id", run_id, "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert reaped.returncode == 0, reaped.stderr
    result = json.loads(reaped.stdout)
    assert sorted(result["confirmed"]) == sorted(s["sandbox_id"] for s in leaked)
    assert not [s for s in emulator.sandboxes() if (s["metadata"] or {}).get(RUN_KEY) == run_id]
    assert emulator.api_key not in reaped.stdout + reaped.stderr


def test_list_then_reap_on_the_command_line(
    alive: Callable[[], dict[str, Any]],
    emulator: Any,
    make_tagged: Callable[..., list[str]],
    run_id: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """--list shows the run and kills nothing; --run-id then reaps it and says so line by line."""
    ids = make_tagged(2, run_id)
    monkeypatch.setenv("E2B_API_URL", emulator.url)
    monkeypatch.setenv("E2B_API_KEY", emulator.api_key)
    assert main(["--list", "--json"]) == 0
    runs = {r["run_id"]: r for r in json.loads(capsys.readouterr().out)}
    assert runs[run_id]["sandbox_ids"] == sorted(ids)
    assert set(ids) <= set(alive())
    assert main(["--run-id", run_id]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out == [
        *(f"reaped {sid}" for sid in sorted(ids)),
        f"2 matched, 2 confirmed gone, 0 failed ({emulator.url})",
    ]
    assert not set(ids) & set(alive())


def test_unkillable_sandbox_fails_the_command(
    emulator: Any,
    make_tagged: Callable[..., list[str]],
    run_id: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A sandbox whose kill fails is printed with its error and the exit status is 1."""
    (sid,) = make_tagged(1, run_id)
    monkeypatch.setenv("E2B_API_KEY", emulator.api_key)
    emulator.faults.add(route="DELETE /sandboxes/*", answer={"kill_fails": True}, times=1, sandbox=sid)
    try:
        assert main(["--api-url", emulator.url, "--run-id", run_id]) == 1
    finally:
        emulator.faults.clear()
    out = capsys.readouterr().out
    assert f"FAILED {sid}: kill failed: SandboxException: 500: kill failed (injected)" in out
    assert main(["--api-url", emulator.url, "--run-id", run_id]) == 0
