"""The pure grouping behind find_stale_runs."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from pytest_e2b_env.targets.reap import describe_stale_runs, group_runs

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
rows = st.lists(
    st.tuples(
        st.sampled_from(["run-a", "run-b", "run-c"]),
        st.uuids().map(lambda u: u.hex[:20]),
        st.integers(min_value=0, max_value=86_400).map(lambda s: NOW - timedelta(seconds=s)),
    ),
    max_size=20,
    unique_by=lambda r: r[1],
)


@given(rows, st.sampled_from([None, "run-a"]))
def test_every_sandbox_lands_in_its_run_once(
    tagged: list[tuple[str, str, datetime]], exclude: str | None
) -> None:
    """Each sandbox appears once, under its own run; the excluded run never appears."""
    groups = group_runs(tagged, NOW, exclude_run_id=exclude)
    listed = [(g["run_id"], sid) for g in groups for sid in g["sandbox_ids"]]
    assert sorted(listed) == sorted((run, sid) for run, sid, _ in tagged if run != exclude)
    assert all(g["count"] == len(g["sandbox_ids"]) for g in groups)


@given(rows)
def test_oldest_run_first_with_its_oldest_start(tagged: list[tuple[str, str, datetime]]) -> None:
    """Runs are ordered oldest first; each reports the age of its oldest sandbox."""
    groups = group_runs(tagged, NOW)
    ages = [g["age_seconds"] for g in groups]
    assert ages == sorted(ages, reverse=True)
    for group in groups:
        oldest = min(started for run, _, started in tagged if run == group["run_id"])
        assert group["age_seconds"] == round((NOW - oldest).total_seconds(), 1)
        assert group["oldest_started_at"] == oldest.isoformat().replace("+00:00", "Z")


def test_naive_start_times_are_utc() -> None:
    """A start time without a zone is read as UTC, not local time."""
    (group,) = group_runs([("r", "i1", datetime(2026, 11, 29, 11, 0))], NOW)
    assert group["age_seconds"] == 3600.0


def test_describe_stale_runs_names_the_fix() -> None:
    """Each stale run becomes one line ending in the reap command that removes it."""
    runs = group_runs([("run-x", "i1", NOW - timedelta(seconds=90)), ("run-x", "i2", NOW)], NOW)
    assert describe_stale_runs(runs, live=True) == [
        "stale run run-x: 2 sandbox(es) alive, oldest started 90 s ago; "
        "remove with: pytest-e2b-env reap --live --run-id run-x"
    ]
