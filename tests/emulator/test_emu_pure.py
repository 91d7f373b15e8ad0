"""Pure parts of the emulator: fault rule matching and counters, route naming, ledger marks, end events."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from pytest_e2b_env.emulator.control_plane import _decode_token, _encode_token
from pytest_e2b_env.emulator.processes import end_event
from pytest_e2b_env.wire.faults import FaultAnswer, FaultPlan, FaultRule
from pytest_e2b_env.wire.ledger import Ledger, op_for
from pytest_e2b_env.wire.routes import is_stream, route_of

ids = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789", min_size=1, max_size=20)


@given(after=st.integers(0, 5), times=st.integers(1, 5), requests=st.integers(0, 15))
def test_rule_fires_times_after_skipping_after(after: int, times: int, requests: int) -> None:
    """A rule lets `after` matches pass, then fires exactly `times` times, then never again."""
    plan = FaultPlan()
    plan.add({"route": "POST /v2/sandboxes", "answer": {"status": 429}, "after": after, "times": times})
    fired = [
        plan.pick("POST /v2/sandboxes", "POST /v2/sandboxes", None, None) is not None for _ in range(requests)
    ]
    expected = [after <= i < after + times for i in range(requests)]
    assert fired == expected


@given(sandbox_id=ids, other=ids)
def test_sandbox_filter_only_matches_its_sandbox(sandbox_id: str, other: str) -> None:
    """A rule with sandbox= never fires for another sandbox's requests."""
    plan = FaultPlan()
    plan.add({"route": "*", "sandbox": sandbox_id, "answer": {"delay": 0}, "times": None})
    assert plan.pick("GET /health", "GET /health", sandbox_id, None) is not None
    assert (plan.pick("GET /health", "GET /health", other, None) is not None) == (other == sandbox_id)


@given(sandbox_id=ids)
def test_route_of_names_template_and_sandbox(sandbox_id: str) -> None:
    """REST paths become templates with {id}; envd requests name their sandbox by header."""
    assert route_of("DELETE", f"/sandboxes/{sandbox_id}", {}) == ("DELETE /sandboxes/{id}", sandbox_id)
    assert route_of("POST", f"/v2/sandboxes/{sandbox_id}/connect", {}) == (
        "POST /v2/sandboxes/{id}/connect",
        sandbox_id,
    )
    assert route_of("POST", "/v2/sandboxes", {}) == ("POST /v2/sandboxes", None)
    envd = route_of("POST", "/process.Process/Start", {"e2b-sandbox-id": sandbox_id})
    assert envd == ("POST /process.Process/Start", sandbox_id)
    assert is_stream(envd[0])
    assert not is_stream("GET /files")


def test_globs_match_concrete_path_or_template() -> None:
    """`route` globs match either the concrete path or the template; `contains` needs the body."""
    rule = FaultRule.model_validate({"route": "DELETE /sandboxes/*", "answer": {"kill_fails": True}})
    assert rule.matches("DELETE /sandboxes/iabc", "DELETE /sandboxes/{id}", "iabc", None)
    assert not rule.matches("GET /sandboxes/iabc", "GET /sandboxes/{id}", "iabc", None)
    exact = FaultRule.model_validate({"route": "DELETE /sandboxes/{id}", "answer": {"kill_fails": True}})
    assert exact.matches("DELETE /sandboxes/iabc", "DELETE /sandboxes/{id}", "iabc", None)
    body = FaultRule.model_validate({"route": "*", "contains": "secret-op", "answer": {"status": 500}})
    assert body.matches("POST /x", "POST /x", None, "run secret-op now")
    assert not body.matches("POST /x", "POST /x", None, None)


@pytest.mark.parametrize(
    "answer",
    [
        {},
        {"status": 500, "delay": 1},
        {"retry_after": 1},
        {"status": 200},
        {"lose_sandbox": True, "drop_stream": True},
    ],
)
def test_bad_answers_are_refused(answer: dict[str, object]) -> None:
    """An answer must name exactly one valid kind."""
    with pytest.raises(ValidationError):
        FaultAnswer.model_validate(answer)


@given(st.lists(st.sampled_from(["create", "kill", "run"]), max_size=30), st.integers(0, 30))
def test_ledger_since_mark_returns_exactly_later_entries(ops: list[str], split: int) -> None:
    """ledger.since(mark) returns exactly the entries recorded after the mark, in order."""
    ledger = Ledger()
    split = min(split, len(ops))
    for op in ops[:split]:
        ledger.record(op)
    mark = ledger.mark()
    for op in ops[split:]:
        ledger.record(op)
    assert [e["op"] for e in ledger.since(mark)] == ops[split:]
    assert [e["seq"] for e in ledger.since(0)] == list(range(len(ops)))


def test_op_names() -> None:
    """Route templates map to the ledger's operation names."""
    assert op_for("POST /v2/sandboxes") == "create"
    assert op_for("POST /process.Process/SendInput") == "run"
    assert op_for("POST /filesystem.Filesystem/Stat") == "fs"
    assert op_for("GET /files") == "file_read"


@given(st.integers(-64, 255))
def test_end_event_matches_go_wording(code: int) -> None:
    """End events carry envd's (Go's) exit wording: 'exit status N' or exit -1 and 'signal: ...'."""
    end = end_event(code).event.value
    if code < 0:
        assert (end.exit_code, end.exited) == (-1, False)
        assert end.status.startswith("signal: ")
    else:
        assert (end.exit_code, end.exited, end.status) == (code, True, f"exit status {code}")
        assert (end.error or None) == (None if code == 0 else f"exit status {code}")


@given(st.text(min_size=1, max_size=30), ids)
def test_next_token_round_trips(started: str, sandbox_id: str) -> None:
    """List page tokens decode to the cursor they encode; garbage decodes to None."""
    started = started.replace("|", "")
    assert _decode_token(_encode_token(started, sandbox_id).decode()) == (started, sandbox_id)
    assert _decode_token("garbage!") is None


def test_envd_stubs_load_without_the_sdk() -> None:
    """In a fresh process the envd stubs load without importing the SDK's top level (fast start)."""
    import subprocess
    import sys

    code = (
        "import sys; from pytest_e2b_env.emulator import envd_stubs; light = envd_stubs.load(); "
        "from e2b.envd.process import process_connect; print(light, 'e2b.sandbox' in sys.modules)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.split() == ["True", "False"]
