"""The catalog is fair: every correct sample passes it, every defective sample is caught."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_e2b_env.catalog.catch import Sample, discover, run_sample
from pytest_e2b_env.catalog.contract import POLICIES
from pytest_e2b_env.catalog.model import FAMILIES

ROOT = Path(__file__).resolve().parents[2] / "fixtures" / "subjects"
SAMPLES = discover(ROOT)
DEFECTS = [s for s in SAMPLES if s.defective]
BASELINES = [s for s in SAMPLES if not s.defective]


def _id(sample: Sample) -> str:
    return sample.spec.partition(":")[0]


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
@pytest.mark.parametrize("sample", DEFECTS, ids=_id)
def test_defective_sample_is_caught_by_its_family(sample: Sample) -> None:
    """Running the sample's CAUGHT_BY family fails at least one case of that family."""
    outcome = run_sample(sample, families=[str(sample.caught_by)], timeout=400)
    assert outcome.problem is None, outcome.problem
    assert outcome.caught, (
        f"{sample.spec} ({sample.bug}) was not caught by {sample.caught_by}: failed {outcome.failed_cases}"
    )


@pytest.mark.slow
@pytest.mark.parametrize("sample", BASELINES, ids=_id)
def test_correct_sample_passes_the_whole_catalog(sample: Sample) -> None:
    """The false-failure guard: correct code in another shape fails no case (skips must be named)."""
    outcome = run_sample(sample, timeout=900)
    assert outcome.problem is None, outcome.problem
    assert not outcome.failed_cases, f"{sample.spec} falsely failed: {outcome.failed_cases}"
    assert all(outcome.skipped.values()), f"unnamed skips: {outcome.skipped}"
    assert outcome.counts.get("passed", 0) >= 15, outcome.counts
