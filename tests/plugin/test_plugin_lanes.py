"""Catalog cases in lanes: the verdicts, records and their order of a serial run; -x and -k hold."""

from __future__ import annotations

import json
import os

import pytest
from plugin_helpers import CASES, only_bundle, read_json, write_project

from pytest_e2b_env.adapter.settings import default_lanes


def _more_cases(pytester: pytest.Pytester, copies: int = 3) -> list[str]:
    """The tiny case file, each case repeated under new ids (so lanes have work to share)."""
    text, ids = "", []
    for n in range(copies):
        text += CASES.replace('id = "reward-tiny-', f'id = "reward-tiny{n}-')
        ids += [f"reward-tiny{n}-correct", f"reward-tiny{n}-no-fence"]
    (pytester.path / "mycases" / "reward.toml").write_text(text)
    return ids


def _records(pytester: pytest.Pytester, evidence: str) -> list[tuple[str, str, str | None]]:
    """(id, status, reason: the failed criteria) per record, in bundle order."""
    bundle = only_bundle(pytester.path / evidence)
    rows = [json.loads(line) for line in (bundle / "cases.jsonl").read_text().splitlines()]
    return [(r["id"], r["status"], r["reason"]) for r in rows]


@pytest.mark.full
@pytest.mark.parametrize("subject", ["tinyreward:make_reward", "tinyreward:leaky_reward"])
def test_lanes_give_the_serial_verdicts_in_the_same_order(pytester: pytest.Pytester, subject: str) -> None:
    """Same statuses, same failed criteria, records in catalog order, with 1 lane and with 3."""
    write_project(pytester, subject=subject)
    ids = _more_cases(pytester)
    serial = pytester.runpytest("--e2b-lanes", "1", "--e2b-evidence", "serial")
    laned = pytester.runpytest("--e2b-lanes", "3", "--e2b-evidence", "laned")
    assert serial.parseoutcomes() == laned.parseoutcomes()
    assert [r[0] for r in _records(pytester, "laned")] == ids
    assert _records(pytester, "laned") == _records(pytester, "serial")
    assert read_json(only_bundle(pytester.path / "laned") / "coverage.json")["complete"]
    # the manifest says how many cases ran at once, for the timings beside it
    assert read_json(only_bundle(pytester.path / "serial") / "run-manifest.json")["lanes"] == 1
    assert read_json(only_bundle(pytester.path / "laned") / "run-manifest.json")["lanes"] == 3


@pytest.mark.full
def test_without_a_lane_count_a_run_takes_three_lanes_per_usable_cpu(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No --e2b-lanes and no e2b_lanes: the lanes follow the CPUs this process may run on (here one)."""
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0})
    write_project(pytester)
    _more_cases(pytester)
    result = pytester.runpytest("--e2b-evidence", "ev")
    result.assert_outcomes(passed=6)
    assert read_json(only_bundle(pytester.path / "ev") / "run-manifest.json")["lanes"] == 3


@pytest.mark.parametrize(("cpus", "lanes"), [(1, 3), (2, 6), (3, 8), (64, 8)])
def test_the_default_lane_count_is_three_per_usable_cpu_at_most_eight(
    monkeypatch: pytest.MonkeyPatch, cpus: int, lanes: int
) -> None:
    """The affinity mask decides (taskset, cpusets), not the machine's CPU count."""
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(cpus)))
    monkeypatch.setattr(os, "cpu_count", lambda: 128)
    assert default_lanes() == lanes


def test_without_an_affinity_call_the_cpu_count_decides(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(os, "sched_getaffinity")
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    assert default_lanes() == 6
    monkeypatch.setattr(os, "cpu_count", lambda: None)  # unknown: as one CPU
    assert default_lanes() == 3


@pytest.mark.full
def test_exitfirst_stops_the_lanes_and_leaves_nothing(pytester: pytest.Pytester) -> None:
    """-x: the first failure is reported, no later case is, and the run leaves no sandbox."""
    write_project(pytester, subject="tinyreward:leaky_reward")
    _more_cases(pytester, copies=4)
    result = pytester.runpytest("-x", "--e2b-lanes", "2", "--e2b-evidence", "ev")
    result.assert_outcomes(failed=1)
    cleanup = read_json(only_bundle(pytester.path / "ev") / "cleanup.json")["records"]
    assert all(r["confirmed_absent_at"] for r in cleanup), cleanup


@pytest.mark.full
def test_k_selects_cases_for_the_lanes(pytester: pytest.Pytester) -> None:
    """-k: only the selected cases run, in lanes, and only they are recorded."""
    write_project(pytester)
    _more_cases(pytester)
    result = pytester.runpytest("-k", "no-fence", "--e2b-lanes", "3", "--e2b-evidence", "ev")
    result.assert_outcomes(passed=3)
    assert [r[0] for r in _records(pytester, "ev")] == [f"reward-tiny{n}-no-fence" for n in range(3)]


@pytest.mark.parametrize("value", ["0", "17", "four"])
def test_a_bad_lane_count_is_a_usage_error_naming_it(pytester: pytest.Pytester, value: str) -> None:
    """--e2b-lanes outside 1..16 stops the run with the value and an example."""
    write_project(pytester)
    result = pytester.runpytest("--e2b-lanes", value)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*--e2b-lanes={value!r} is not a number of lanes from 1 to 16*"])


@pytest.mark.parametrize(
    ("counts", "width", "kinds"),
    [
        ({"reward": 35, "episode": 25}, 4, ["episode", "episode", "reward", "reward"]),
        ({"reward": 30, "episode": 10}, 4, ["episode", "reward", "reward", "reward"]),
        ({"reward": 6}, 3, ["reward", "reward", "reward"]),
        ({"reward": 5, "episode": 1}, 1, ["episode", "reward"]),  # each kind gets a lane
        ({"reward": 0, "episode": 3}, 2, ["episode", "episode"]),
    ],
)
def test_lanes_are_shared_by_kind_in_proportion(counts: dict[str, int], width: int, kinds: list[str]) -> None:
    """A lane hosts one kind's subject, so lanes go to kinds by their case counts."""
    from pytest_e2b_env.adapter.lanes import share_lanes

    assert share_lanes(counts, width) == kinds


class _Template:
    """What the lanes ask of a kind's template: whether its imports are done, whether it forks."""

    def __init__(self, ready: bool, refused: bool = False) -> None:
        self.forking = ready and not refused
        self.done = ready

    def ready(self) -> bool:
        return self.done


def test_a_lane_helps_a_kind_that_forks_while_its_own_template_imports() -> None:
    """An episode lane runs reward cases until openenv is imported, then its own."""
    from pytest_e2b_env.adapter.lanes import Lanes
    from pytest_e2b_env.catalog.loader import default_cases_dir, load_cases

    cases = load_cases([default_cases_dir()])
    by_kind = {k: [c for c in cases if c.subject == k][:3] for k in ("reward", "episode")}
    items = [(c.id, c, None) for k in ("reward", "episode") for c in by_kind[k]]
    lanes = Lanes(None, items, 2, open_target=None)  # type: ignore[arg-type]
    lanes._alive = {"reward": 1, "episode": 1}
    importing = _Template(ready=False)
    lanes._templates = {"reward": _Template(ready=True), "episode": importing}  # type: ignore[dict-item]
    lanes._probe = dict.fromkeys(lanes._probe, "done")  # each kind's first case ran alone already

    def kind_taken(kind: str, hosted: set[str]) -> str | None:
        taken = lanes._next(kind, hosted, 0)
        return taken if taken is None or isinstance(taken, str) else taken[1].subject

    assert kind_taken("episode", set()) == "reward"  # helps while openenv imports
    importing.forking = importing.done = True
    assert kind_taken("episode", {"reward"}) == "episode"  # its own, once it can fork
    lanes._templates = {"reward": _Template(ready=False), "episode": _Template(ready=False)}  # type: ignore[dict-item]
    assert kind_taken("reward", set()) == "wait"  # both import: wait for the first to be done
    del lanes._templates["episode"]
    assert kind_taken("reward", set()) == "wait"  # the other kind's lane has not started it yet
    lanes._templates["episode"] = _Template(ready=True, refused=True)  # type: ignore[assignment]
    assert kind_taken("reward", set()) == "reward"  # the other kind spawns its hosts: its own


def test_the_next_run_starts_the_case_that_took_longest_first() -> None:
    """Each lane takes its kind's cases by last run's time, longest first; unseen ones before all."""
    from pytest_e2b_env.adapter.lanes import Lanes
    from pytest_e2b_env.catalog.loader import default_cases_dir, load_cases

    cases = [c for c in load_cases([default_cases_dir()]) if c.subject == "reward"][:4]
    items = [(c.id, c, None) for c in cases]
    seconds = {cases[0].id: 0.5, cases[1].id: 6.0, cases[2].id: 2.0}  # cases[3]: never seen
    lanes = Lanes(None, items, 2, open_target=None, seconds=seconds)  # type: ignore[arg-type]
    lanes._alive = {"reward": 2}
    lanes._probe = {"reward": "done"}
    taken = [lanes._next("reward", {"reward"}, 0) for _ in cases]
    assert [t[0] for t in taken if isinstance(t, tuple)] == [cases[n].id for n in (3, 1, 2, 0)]
    plain = Lanes(None, items, 2, open_target=None)  # type: ignore[arg-type]
    plain._alive = {"reward": 2}
    plain._probe = {"reward": "done"}
    assert [plain._next("reward", {"reward"}, 0)[0] for _ in cases] == [c.id for c in cases]  # type: ignore[index]


def test_a_kinds_first_case_runs_alone_and_a_fixed_port_keeps_the_kind_in_its_lane() -> None:
    """The shortest case of a kind is its probe: other lanes wait for it; after it, a subject that
    listens on a fixed port keeps its kind in the probe's lane, and the others end."""
    from pytest_e2b_env.adapter.lanes import Lanes
    from pytest_e2b_env.catalog.loader import default_cases_dir, load_cases

    cases = [c for c in load_cases([default_cases_dir()]) if c.subject == "reward"][:4]
    items = [(c.id, c, None) for c in cases]
    seconds = {c.id: float(n + 1) for n, c in enumerate(cases)}
    lanes = Lanes(None, items, 2, open_target=None, seconds=seconds)  # type: ignore[arg-type]
    lanes._alive = {"reward": 2}
    probe = lanes._next("reward", {"reward"}, 0)
    assert isinstance(probe, tuple)
    assert probe[0] == cases[0].id  # the shortest: the other lane waits for it
    assert lanes._next("reward", {"reward"}, 1) == "wait"
    lanes.serial["reward"] = "listens on fixed port 8010"
    lanes._probe["reward"] = "done"
    assert lanes._next("reward", {"reward"}, 1) is None  # not its lane's kind any more: it ends
    rest = [lanes._next("reward", {"reward"}, 0) for _ in cases[1:]]
    assert [t[0] for t in rest if isinstance(t, tuple)] == [cases[n].id for n in (3, 2, 1)]


@pytest.mark.full
def test_case_times_are_kept_for_the_next_run_and_change_no_record(pytester: pytest.Pytester) -> None:
    """A laned run leaves each case's time in pytest's cache; a run that uses it (reversed, so the
    order differs) gives the same records in catalog order; a malformed cache is ignored."""
    write_project(pytester)
    ids = _more_cases(pytester)
    first = pytester.runpytest("--e2b-lanes", "3", "--e2b-evidence", "first")
    kept = read_json(pytester.path / ".pytest_cache" / "v" / "pytest_e2b_env" / "case_seconds")
    by_id = {key.rpartition("::")[2]: value for key, value in kept.items()}
    assert sorted(by_id) == sorted(ids)
    assert all(isinstance(v, float) and v > 0 for v in by_id.values()), kept
    reversed_times = {key: float(n) for n, key in enumerate(kept)}  # the last case now "longest"
    (pytester.path / ".pytest_cache" / "v" / "pytest_e2b_env" / "case_seconds").write_text(
        json.dumps(reversed_times)
    )
    second = pytester.runpytest("--e2b-lanes", "3", "--e2b-evidence", "second")
    assert first.parseoutcomes() == second.parseoutcomes()
    assert [r[0] for r in _records(pytester, "second")] == ids
    assert _records(pytester, "second") == _records(pytester, "first")
    (pytester.path / ".pytest_cache" / "v" / "pytest_e2b_env" / "case_seconds").write_text('["not", "a map"]')
    third = pytester.runpytest("--e2b-lanes", "3", "--e2b-evidence", "third")
    assert third.parseoutcomes() == first.parseoutcomes()
