"""The catalog is fair: every defective sample is caught (the clean guard is in test_samples_clean.py).

The two whole-table tests live in two files so that pytest-xdist (``--dist loadfile``) can run them
on different workers.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_e2b_env.catalog.catch import Sample, discover, run_all, run_sample
from pytest_e2b_env.catalog.contract import POLICIES
from pytest_e2b_env.catalog.model import FAMILIES

ROOT = Path(__file__).resolve().parents[2] / "fixtures" / "subjects"
SAMPLES = discover(ROOT)
DEFECTS = [s for s in SAMPLES if s.defective]
BASELINES = [s for s in SAMPLES if not s.defective]


def test_samples_declare_what_they_are() -> None:
    """Defects name their bug and an existing family; baselines relax only known policies."""
    assert len([s for s in DEFECTS if s.kind == "reward"]) >= 9
    assert len([s for s in DEFECTS if s.kind == "episode"]) >= 9
    assert len(BASELINES) >= 5
    assert {s.kind for s in BASELINES} == {"reward", "episode"}
    for sample in DEFECTS:
        assert sample.bug, sample.spec
        assert sample.caught_by in FAMILIES, sample.spec
    for sample in SAMPLES:
        assert set(sample.relax) <= set(POLICIES), sample.spec


@pytest.mark.slow
def test_every_defective_sample_is_caught_by_its_family() -> None:
    """Running each sample's CAUGHT_BY family fails at least one case of that family (two at a time).

    Each run stops at its first failed case: the family was selected with ``-k``, so that case is
    of the family, and one is all the claim needs.
    """
    outcomes = run_all(DEFECTS, parallel=2, first_catch=True)
    problems = [f"{o.sample.spec}: {o.problem}" for o in outcomes if o.problem]
    missed = [f"{o.sample.spec} ({o.sample.bug}): failed {o.failed_cases}" for o in outcomes if not o.caught]
    assert not problems, problems
    assert not missed, "\n".join(missed)


@pytest.mark.full
def test_a_false_failure_says_what_was_expected_and_seen_and_keeps_its_bundle(tmp_path: Path) -> None:
    """A baseline run without the relaxation it needs: the reason names the criterion's values."""
    (sync,) = [s for s in BASELINES if s.spec.startswith("baseline_reward_sync:")]
    strict = Sample(sync.path, sync.spec, sync.kind)  # fence-variants not relaxed
    outcome = run_sample(strict, families=["good"], keep=tmp_path)
    assert outcome.failed_cases == ["reward-good-fence-variants"]
    reason = outcome.reasons["reward-good-fence-variants"]
    assert "rewards: expected [1.0, 1.0, 1.0]" in reason
    assert '"got": [1.0, 0.0, 0.0]' in reason
    assert outcome.kept is not None
    assert (outcome.kept / "cases" / "reward-good-fence-variants" / "report.json").is_file()
