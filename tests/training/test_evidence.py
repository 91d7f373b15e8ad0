"""The training run's evidence: judged checks, sandbox records from the ledger, and the cleanup path."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pytest_e2b_env.cli.train import parse_settings
from pytest_e2b_env.errors import CleanupError
from pytest_e2b_env.evidence import verify_bundle
from pytest_e2b_env.training.evidence import CASE_IDS, sandbox_summary, training_cases, write_bundle
from pytest_e2b_env.training.record import RunRecord
from pytest_e2b_env.training.run import Progress, _finish

LEDGER = [
    {"t": 10.0, "op": "create", "sandbox_id": "a", "status": 201},
    {"t": 11.0, "op": "run", "sandbox_id": "a", "status": 200},
    {"t": 12.0, "op": "create", "sandbox_id": "b", "status": 201},
    {"t": 12.5, "op": "create", "sandbox_id": None, "status": 429},
    {"t": 13.0, "op": "kill", "sandbox_id": "a", "status": 204},
]


def _doc(**overrides: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "mode": "reward",
        "settings": {"max_steps": 2, "baseline_only": False, "seed": 1},
        "error": None,
        "before": {"eval_reward": 0.25},
        "after": {"eval_reward": 0.5},
        "steps": [{"step": 1}, {"step": 2}],
        "weights": {"changed_any": True, "changed": 24},
        "reward": {"workers_created": 2},
        "cleanup": {"closed": True, "leaked": []},
        "target": {"offline": True, "api_url": "http://127.0.0.1:1", "isolation": "process"},
        "status": "ok",
    }
    doc.update(overrides)
    return doc


def test_ledger_gives_one_cleanup_record_per_sandbox() -> None:
    """Every created sandbox gets a record; killed ones are confirmed, ones alive at the end are errors."""
    summary = sandbox_summary(LEDGER, alive=["b"])
    assert summary["created"] == 2
    assert summary["ops"] == {"create": 3, "run": 1, "kill": 1}
    by_id = {r["sandbox_id"]: r for r in summary["records"]}
    assert by_id["a"]["confirmed_absent_at"] == "1970-01-01T00:00:13.000+00:00"
    assert by_id["b"]["error"] == "still alive at the end of the run"


def test_a_good_run_passes_every_check() -> None:
    """A complete run with spread, weight change and clean cleanup passes all four reward checks."""
    cases = training_cases(_doc(), sandbox_summary(LEDGER, alive=[]))
    assert [c["id"] for c in cases] == CASE_IDS["reward"]
    assert {c["status"] for c in cases} == {"passed"}


def test_unchanged_weights_and_a_leak_fail_their_checks() -> None:
    """Weights that did not move fail train-grpo; a sandbox alive at the end fails train-cleanup."""
    doc = _doc(weights={"changed_any": False, "changed": 0})
    cases = {c["id"]: c for c in training_cases(doc, sandbox_summary(LEDGER, alive=["b"]))}
    assert cases["train-grpo"]["status"] == "failed"
    assert cases["train-grpo"]["reason"] == "failed: weights"
    assert cases["train-cleanup"]["reason"] == "failed: no-leak"


def test_baseline_only_skips_training_checks_with_a_reason() -> None:
    """--baseline-only reports train-grpo and train-after as skipped, saying why."""
    doc = _doc(settings={"max_steps": 2, "baseline_only": True, "seed": 1}, after=None, steps=[])
    cases = {c["id"]: c for c in training_cases(doc, None)}
    assert cases["train-grpo"]["status"] == cases["train-after"]["status"] == "skipped"
    assert cases["train-grpo"]["reason"] == "--baseline-only: no training requested"


def test_episode_preflight_must_score_repair_one_and_buggy_zero() -> None:
    """The preflight check passes only for the receipt [1.0 for repairs, 0.0 for buggy submits]."""
    good = {"episodes": [{"script": "repair", "reward": 1.0}, {"script": "buggy", "reward": 0.0}]}
    bad = {"episodes": [{"script": "repair", "reward": 0.0}, {"script": "buggy", "reward": 0.0}]}
    for preflight, status in ((good, "passed"), (bad, "failed"), (None, "failed")):
        doc = _doc(mode="episode", preflight=preflight, episode={"instances": 4})
        assert training_cases(doc, None)[0]["status"] == status


class _SubjectWhoseCloseFails:
    """A subject double: the code under test is the CLI's cleanup handling, not the subject."""

    def metrics(self) -> dict[str, Any]:
        return {"workers_created": 1}

    def close(self) -> None:
        raise CleanupError("worker kill answered 500", ["sb-stuck"])


def test_cleanup_failure_fails_the_run_and_is_written(tmp_path: Path) -> None:
    """A CleanupError from close() marks the run failed, names the ids, and lands in a verifiable bundle."""
    settings = parse_settings(["--tiny", "--offline", "--output-dir", str(tmp_path)], environ={})
    record = RunRecord(mode="reward", settings=settings.as_dict(), run_id="train-test-cleanup")
    record.status = "ok"
    say = Progress()
    _finish(record, _SubjectWhoseCloseFails(), None, say)
    assert record.status == "failed"
    assert record.error is not None
    assert record.error["type"] == "CleanupError"
    assert "sb-stuck" in record.error["message"]
    assert record.cleanup["closed"] is False
    bundle = write_bundle(tmp_path / "evidence", record, say.text(), None, None, secrets=[])
    assert verify_bundle(bundle, CASE_IDS["reward"]) == []
    cases = {c["id"]: c for c in training_cases(record.to_dict(), None)}
    assert cases["train-cleanup"]["status"] == "failed"
