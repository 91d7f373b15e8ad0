"""The case-time cache behind the lanes' order: bounded, tolerant of a bad file, longest first."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pytest_e2b_env.catalog.model import Case


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


def _two_directories(tmp_path: Path) -> list[list[Case]]:
    """The bundled good.toml copied into two directories: the same ids, other source files."""
    from pytest_e2b_env.catalog.loader import parse_cases
    from pytest_e2b_env.data import cases_dir

    text = (cases_dir() / "good.toml").read_text(encoding="utf-8")
    found = []
    for name in ("mine", "theirs"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "good.toml").write_text(text, encoding="utf-8")
        found.append(parse_cases(text, str(tmp_path / name / "good.toml")))
    return found


def test_reference_times_come_from_the_cases_own_directory_and_the_cache_wins(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    """A case directory's seconds.json orders its own cases only; junk entries, a file that is
    not JSON or is too large are ignored; this project's cached time beats the reference."""
    from pytest_e2b_env.adapter import durations

    mine, theirs = _two_directories(tmp_path)
    first, second = mine[0].id, mine[1].id
    entries = {first: 4.5, second: -1, "not-in-this-catalog": 9.0, mine[2].id: "slow"}
    (tmp_path / "mine" / durations.REFERENCE_FILE).write_text(json.dumps({"seconds": entries}))
    assert durations.reference(mine) == {first: 4.5}
    assert durations.reference(theirs) == {}  # the same ids elsewhere: not this file's cases
    for junk in ("{not json", json.dumps(["seconds"]), json.dumps({"seconds": [1, 2]})):
        (tmp_path / "theirs" / durations.REFERENCE_FILE).write_text(junk)
        assert durations.reference(theirs) == {}
    big = {"seconds": {theirs[0].id: 1.0}, "pad": "x" * durations.MAX_REFERENCE_BYTES}
    (tmp_path / "theirs" / durations.REFERENCE_FILE).write_text(json.dumps(big))
    assert durations.reference(theirs) == {}

    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    config = pytester.parseconfigure()
    pairs = [(f"node::{case.id}", case) for case in mine]
    assert durations.estimates(config, pairs) == {f"node::{first}": 4.5}
    durations.save(config, [(f"node::{first}", 0.5), (f"node::{second}", 2.0)])
    assert durations.estimates(config, pairs) == {f"node::{first}": 0.5, f"node::{second}": 2.0}
    no_cache = pytester.parseconfigure("-p", "no:cacheprovider")
    assert durations.estimates(no_cache, pairs) == {f"node::{first}": 4.5}


def test_the_bundled_reference_times_cover_exactly_the_bundled_cases() -> None:
    """cases/seconds.json names every bundled case and nothing else, with a usable time each."""
    import math

    from pytest_e2b_env.adapter import durations
    from pytest_e2b_env.catalog.loader import load_cases
    from pytest_e2b_env.data import cases_dir

    cases = load_cases([cases_dir()])
    raw = json.loads((cases_dir() / durations.REFERENCE_FILE).read_text(encoding="utf-8"))["seconds"]
    ids = {case.id for case in cases}
    fix = "rerun: .venv/bin/python scripts/case_seconds.py"
    assert set(raw) == ids, f"missing {sorted(ids - set(raw))}, stale {sorted(set(raw) - ids)}; {fix}"
    assert all(isinstance(v, int | float) and math.isfinite(v) and v >= 0 for v in raw.values()), fix
    assert durations.reference(cases) == {k: float(v) for k, v in raw.items()}
