"""A harness fault is an error of the harness, never a failure charged to the subject."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from pytest_e2b_env.catalog.contract import load_subject
from pytest_e2b_env.catalog.harness import harness_fault
from pytest_e2b_env.catalog.loader import parse_cases_from_dicts
from pytest_e2b_env.catalog.observe import Call, Observation
from pytest_e2b_env.catalog.runner import run_case
from pytest_e2b_env.settings import TargetSettings, new_run_id
from pytest_e2b_env.targets import Target, open_target

#: Loaded by the emulator's child only (it alone has PYTEST_E2B_ENV_EMULATOR_OWNER): its lifetime
#: renewal fails inside the emulator, as a bug of ours would, answering 500 "internal emulator error".
BROKEN_EMULATOR = """
import os

if os.environ.get("PYTEST_E2B_ENV_EMULATOR_OWNER"):
    from pytest_e2b_env.emulator.control_plane import ControlPlane

    def set_timeout(self, sbx, body):
        raise RuntimeError("the emulator's own bug")

    ControlPlane.set_timeout = set_timeout
"""


@pytest.fixture(scope="module")
def broken(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    """An emulator whose lifetime renewal fails inside it (never through a fault rule)."""
    where = tmp_path_factory.mktemp("broken")
    (where / "sitecustomize.py").write_text(BROKEN_EMULATOR)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PYTHONPATH", str(where))
        opened = open_target(TargetSettings(run_id=new_run_id()))
    try:
        yield opened
    finally:
        opened.close()


def _case(faults: list[dict[str, Any]]) -> Any:
    raw = {
        "id": "reward-harness-probe",
        "subject": "reward",
        "family": "good",
        "description": "A correct reward renewing its sandbox's lifetime scores 1.0.",
        "reward": {"test_cases": [{"input": "1", "output": "1"}], "completions": [{"text": "x"}]},
        "faults": faults,
        "expect": {"rewards": [1.0]},
    }
    return parse_cases_from_dicts([raw], "test")[0]


def test_an_emulator_internal_500_is_the_harness_error_not_a_failure(broken: Target) -> None:
    """The emulator's own 500 on the renewal makes the case an error naming the harness, run twice."""
    record = run_case(_case([]), load_subject("catalog_subjects:renewing", "reward"), broken)
    assert record.status == "error", record.failure_message()
    assert record.reason is not None
    assert record.reason.startswith("harness: the offline target failed on its own"), record.reason
    assert "internal emulator error: RuntimeError" in record.reason
    assert record.attempts == 2
    renewals = [e for e in record.trajectory if e.get("route") == "POST /sandboxes/{id}/timeout"]
    assert renewals
    assert all(e.get("harness_error") for e in renewals), renewals


def test_an_injected_500_of_the_same_status_is_the_subjects_to_handle(target: Target) -> None:
    """A fault rule answering the same 500 is the subject's to handle: the case fails, no error."""
    fault = {"route": "POST /sandboxes/*/timeout", "answer": {"status": 500}, "times": 10}
    subject = load_subject("catalog_subjects:renewing", "reward")
    record = run_case(_case([fault]), subject, target)
    assert record.status == "failed", record.failure_message()
    assert record.attempts == 1
    assert not any(e.get("harness_error") for e in record.trajectory)


def _deadline_obs(seconds: float, waited: float, used: float) -> tuple[Observation, list[dict[str, Any]]]:
    call = Call(name="terminal", step=3, seconds=seconds)
    call.deadline = {"limit": 2, "allowed": 5.0, "harness_waited_s": waited, "subject_cpu_s": used}
    obs = Observation(subject="episode", calls=[call])
    criteria = [{"id": "deadline_kept", "passed": False}]
    return obs, criteria


def test_an_overrun_the_starved_machine_explains_is_the_harness_error() -> None:
    """A deadline overran by 2 s while the target's server waited 3 s for a CPU: the machine's."""
    obs, criteria = _deadline_obs(seconds=7.0, waited=3.0, used=0.1)
    why, _ = harness_fault(obs, criteria, failed=True, target="offline")
    assert why is not None
    assert why.startswith("the machine starved the case: step 3 overran by 2.0 s"), why


@pytest.mark.parametrize(("waited", "used"), [(0.5, 0.1), (3.0, 4.0)])
def test_an_overrun_the_machine_does_not_explain_stays_the_subjects(waited: float, used: float) -> None:
    """Too little waiting, or a subject that was the load itself: the overrun is the subject's."""
    obs, criteria = _deadline_obs(seconds=7.0, waited=waited, used=used)
    assert harness_fault(obs, criteria, failed=True, target="offline") == (None, None)
