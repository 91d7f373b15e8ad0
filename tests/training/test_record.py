"""metrics.json: zero-spread warning, reward-stage share, failure recording, JSON safety."""

from __future__ import annotations

import json
import math
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from pytest_e2b_env.errors import CleanupError
from pytest_e2b_env.training.record import (
    RunRecord,
    masked_step_warning,
    mean_zero_std,
    reward_share,
    zero_std_warning,
)

fractions = st.floats(min_value=0.0, max_value=1.0, allow_nan=False)


@given(fractions)
def test_warning_only_when_most_groups_have_zero_spread(frac: float) -> None:
    """The warning appears iff more than half of the reward groups had zero spread, and names the share."""
    warning = zero_std_warning(frac)
    if frac > 0.5:
        assert warning is not None
        assert warning.startswith(f"WARNING: {frac:.0%} of reward groups had zero spread")
        assert "--num-generations" in warning
    else:
        assert warning is None


def test_no_warning_without_training_steps() -> None:
    """A run with no logged step (baseline only) does not warn."""
    assert zero_std_warning(mean_zero_std([{"eval_reward": 0.0}])) is None


@given(st.lists(st.one_of(fractions, st.just(math.nan), st.none()), max_size=20))
def test_mean_zero_std_ignores_missing_and_nan(values: list[float | None]) -> None:
    """The mean covers exactly the finite logged values; None when there are none."""
    history = [{"frac_reward_zero_std": v} if v is not None else {"loss": 0.0} for v in values]
    finite = [v for v in values if v is not None and math.isfinite(v)]
    got = mean_zero_std(history)
    if finite:
        assert got is not None
        assert math.isclose(got, sum(finite) / len(finite))
    else:
        assert got is None


@given(st.lists(st.tuples(st.floats(0.01, 100), st.floats(0, 1)), min_size=1, max_size=10))
def test_reward_share_is_time_weighted(steps: list[tuple[float, float]]) -> None:
    """The share is total reward-stage seconds over total step seconds, within [0, 1]."""
    records = [{"seconds": total, "reward_seconds": total * part} for total, part in steps]
    share = reward_share(records)
    assert share is not None
    assert 0.0 <= share <= 1.0 + 1e-9
    assert math.isclose(share, sum(r["reward_seconds"] for r in records) / sum(r["seconds"] for r in records))


def test_reward_share_without_steps_is_none() -> None:
    """No step timing, no share (never a division by zero)."""
    assert reward_share([]) is None


def test_first_error_wins_and_names_the_phase() -> None:
    """fail() keeps the first error with its phase; a later cleanup error does not overwrite it."""
    record = RunRecord(mode="reward", settings={}, run_id="r1")
    record.phase = "train"
    record.fail(ValueError("boom"))
    record.phase = "cleanup"
    record.fail(CleanupError("kill failed", ["sb1"]))
    assert record.status == "failed"
    assert record.error == {"type": "ValueError", "message": "boom", "phase": "train"}


@given(st.lists(st.floats(allow_nan=True, allow_infinity=True), max_size=5))
def test_metrics_json_is_strict_json(values: list[float]) -> None:
    """Non-finite numbers (TRL logs NaN for absent metrics) become null, so metrics.json is strict JSON."""
    record = RunRecord(mode="episode", settings={"seed": 1}, run_id="r2")
    record.history = [{"reward": v, "step": i} for i, v in enumerate(values)]
    text = json.dumps(record.to_dict(), allow_nan=False)
    loaded = json.loads(text)
    assert [h["reward"] for h in loaded["history"]] == [v if math.isfinite(v) else None for v in values]


def test_write_is_atomic_and_complete(tmp_path: Path) -> None:
    """write() leaves exactly metrics.json (no temp file) holding every top-level section."""
    record = RunRecord(mode="reward", settings={"seed": 3}, run_id="r3")
    record.before = {"eval_reward": 0.5}
    path = record.write(tmp_path / "out" / "metrics.json")
    assert sorted(p.name for p in path.parent.iterdir()) == ["metrics.json"]
    doc = json.loads(path.read_text())
    for key in (
        "status",
        "error",
        "settings",
        "versions",
        "before",
        "after",
        "history",
        "steps",
        "timing",
        "frac_reward_zero_std",
        "reward",
        "cleanup",
        "warnings",
        "held_out_reward",
    ):
        assert key in doc
    assert doc["held_out_reward"] == {"before": 0.5, "after": None}
    assert doc["timing"]["peak_rss_mb"] > 0


def test_masked_step_warning_only_when_most_of_the_step_is_masked() -> None:
    """Half a step masked says nothing; more than half is one warning naming the step and the counts."""
    assert masked_step_warning(3, 2, 4) is None
    assert masked_step_warning(3, 0, 0) is None
    warning = masked_step_warning(3, 3, 4)
    assert warning is not None
    assert warning.startswith("WARNING: step 3: 3 of 4 completions were masked")
