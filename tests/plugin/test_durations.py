"""The case-time cache behind the lanes' order: bounded, tolerant of a bad file, longest first."""

from __future__ import annotations

import json

import pytest


def test_case_times_merge_over_earlier_runs_and_stay_bounded(pytester: pytest.Pytester) -> None:
    """This run's times win, older ones for other cases stay, at most MAX_ENTRIES are kept; junk
    values (negative, NaN, non-numbers, non-string keys) never come back."""
    from pytest_e2b_env.adapter import durations

    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    config = pytester.parseconfigure()
    durations.save(config, [("a", 1.0), ("b", 2.0)])
    durations.save(config, [("b", 5.0), ("c", 0.25)])
    assert durations.load(config) == {"b": 5.0, "c": 0.25, "a": 1.0}
    config.cache.set(durations.KEY, {"a": -1, "b": float("nan"), "c": "slow", "d": 3, "e": True})
    assert durations.load(config) == {"d": 3.0}
    config.cache.set(durations.KEY, ["a", 1])
    assert durations.load(config) == {}
    many = [(f"case-{n}", float(n)) for n in range(durations.MAX_ENTRIES + 50)]
    durations.save(config, many)
    stored = json.loads((pytester.path / ".pytest_cache" / "v" / durations.KEY).read_text())
    assert len(stored) == durations.MAX_ENTRIES


def test_without_a_cache_nothing_is_kept_and_the_order_is_the_catalog(pytester: pytest.Pytester) -> None:
    """-p no:cacheprovider: load gives nothing, save is a no-op, the order is unchanged."""
    from pytest_e2b_env.adapter import durations

    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    config = pytester.parseconfigure("-p", "no:cacheprovider")
    durations.save(config, [("a", 1.0)])
    assert durations.load(config) == {}
    assert durations.longest_first(["x", "y", "z"], {}, key=str) == ["x", "y", "z"]
    assert durations.longest_first(["x", "y", "z"], {"x": 1.0, "z": 2.0}, key=str) == ["y", "z", "x"]
