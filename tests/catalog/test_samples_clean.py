"""The false-failure guard: every correct sample (other people's shapes) passes the whole catalog."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_e2b_env.catalog.catch import discover, run_all

ROOT = Path(__file__).resolve().parents[2] / "fixtures" / "subjects"
BASELINES = [s for s in discover(ROOT) if not s.defective]


@pytest.mark.slow
def test_every_correct_sample_passes_the_whole_catalog(tmp_path: Path) -> None:
    """The false-failure guard: correct code in other shapes fails no case; every skip is named.

    The bundle of a sample that failed a case is kept under ``tmp_path`` (named in the message).
    """
    outcomes = run_all(BASELINES, parallel=2, keep=tmp_path)
    problems = [f"{o.sample.spec}: {o.problem}" for o in outcomes if o.problem]
    false = [f"{o.sample.spec}: {o.reasons} (bundle: {o.kept})" for o in outcomes if o.failed_cases]
    assert not problems, problems
    assert not false, "falsely failed: " + "; ".join(false)
    for o in outcomes:
        assert all(o.skipped.values()), f"{o.sample.spec}: unnamed skips {o.skipped}"
        assert o.counts.get("passed", 0) >= 15, (o.sample.spec, o.counts)
