"""TRL's shapes and rules: ``env.reward``, tools with hostile arguments, reused instances, the factory.

Each case is proven against the defective sample it must catch and the correct samples it must
pass (real e2b SDK against the emulator); the pure parts (the hostile arguments, the shape of
``env.reward``, the pickle check, the reset rule) are checked on their own.
"""

from __future__ import annotations

import functools
import json
import threading
from pathlib import Path
from typing import Any

import pytest

from pytest_e2b_env.catalog.contract import Contract, load_subject, parse_contract
from pytest_e2b_env.catalog.hints import shape_hints
from pytest_e2b_env.catalog.loader import default_cases_dir, load_cases, parse_cases_from_dicts
from pytest_e2b_env.catalog.observe import Call, Observation
from pytest_e2b_env.catalog.runner import run_case
from pytest_e2b_env.catalog.toolprobe import CANARY, OVERSIZE, HostProbe, arguments
from pytest_e2b_env.catalog.trlrules import trl_criteria
from pytest_e2b_env.catalog.trlshape import owns_reward, pickle_problem, reward_shape, tool_params
from pytest_e2b_env.errors import ConfigError
from pytest_e2b_env.targets import Target

SAMPLES = Path(__file__).resolve().parents[2] / "fixtures" / "subjects"
REFERENCE = "pytest_e2b_env.episode:ReportEpisode"
TOOLS = "baseline_episode_tools:FileToolsEpisode"
REWARD_ATTR = "baseline_episode_reward_attr:RewardAttributeEpisode"
HOME = "baseline_episode_home:RepairEpisode"


# ---------------------------------------------------------------- pure parts


class _Attr:
    def __init__(self) -> None:
        self.reward = 1.0


class _ClassAttr:
    reward = 0.0


class _Property:
    @property
    def reward(self) -> float:
        return 1.0


class _Method:
    def reward(self) -> float:
        return 1.0


class _Owns:
    def get_reward(self) -> float:
        return 1.0


@pytest.mark.parametrize(
    ("env", "shape"),
    [(_Attr(), "attribute"), (_ClassAttr(), "attribute"), (_Property(), "property"), (_Method(), "method")],
)
def test_the_shape_of_env_reward_is_read_without_evaluating_it(env: Any, shape: str) -> None:
    """An instance or class attribute, a property (not evaluated), a method: each named as it is."""
    assert reward_shape(env) == shape
    assert reward_shape(object()) == "missing"


def test_only_a_get_reward_function_owns_the_reward() -> None:
    """TRL calls get_reward() when the class has a function of that name, as getmembers lists it."""
    assert owns_reward(_Owns)
    assert not owns_reward(_Property)
    assert not owns_reward(_Attr)


def _module_level_factory() -> _Owns:
    return _Owns()


def test_a_factory_async_grpo_cannot_pickle_is_named() -> None:
    """A class, a module-level function or a partial of one pickles; a lambda, a closure, a lock do not."""
    assert pickle_problem(_Owns) is None
    assert pickle_problem(_module_level_factory) is None
    assert pickle_problem(functools.partial(_module_level_factory)) is None

    def closure() -> _Owns:
        return _Owns()

    lambda_problem = pickle_problem(lambda: _Owns())
    assert lambda_problem is not None
    assert "<lambda>" in lambda_problem
    assert pickle_problem(closure) is not None
    lock_problem = pickle_problem(functools.partial(_module_level_factory, threading.Lock()))
    assert lock_problem is not None
    assert lock_problem.startswith("TypeError")


class _FileTools:
    def reset(self, **kwargs: Any) -> None: ...

    def write_file(self, path: str, content: str, mode: int = 0o644, *rest: Any, **more: Any) -> str:
        return ""

    def count(self, n: int, flag: bool) -> str:
        return ""


def test_hostile_arguments_reach_every_string_parameter() -> None:
    """Strings take the hostile value, other kinds a plain one; *args and **kwargs are never named."""
    params = tool_params(_FileTools)
    assert [p["name"] for p in params["write_file"]] == ["path", "content", "mode", "rest", "more"]
    calls = dict(arguments("write_file", params["write_file"], "/tmp/pe2b-host-x"))
    assert list(calls) == [
        "traversal",
        "absolute",
        "canary",
        "oversized",
        "wrong-types",
        "nulls",
        "nested",
        "missing",
        "unknown",
    ]
    traversal = calls["traversal"]
    assert set(traversal) == {"path", "content", "mode"}
    assert Path("/home/user/work", traversal["path"]).resolve() == Path("/tmp/pe2b-host-x/rel-write_file")
    assert traversal["mode"] == 1
    assert calls["absolute"]["path"] == "/tmp/pe2b-host-x/abs-write_file"
    assert calls["canary"]["content"].endswith(f"/tmp/pe2b-host-x/{CANARY}")
    assert len(calls["oversized"]["content"]) == OVERSIZE
    assert calls["wrong-types"] == {"path": 12345, "content": 12345, "mode": "12345"}
    assert calls["missing"] == {}
    assert calls["unknown"]["pe2b_unexpected"] == 1
    wrong = dict(arguments("count", params["count"], "/h"))["wrong-types"]
    assert wrong == {"n": "12345", "flag": "yes"}


def test_the_host_probe_sees_writes_changes_and_reads() -> None:
    """A file left in the directory, the canary rewritten, its text read back: each is reported."""
    probe = HostProbe().open()
    try:
        assert probe.inspect([]) == {
            "dir": probe.dir,
            "written": [],
            "canary_changed": False,
            "canary_read": False,
        }
        canary = Path(probe.dir, CANARY)
        text = canary.read_text()
        (Path(probe.dir) / "rel-write_file").write_text("x")
        canary.write_text("changed, and longer than before")
        seen = probe.inspect([json.dumps({"value": text})])
        assert seen["written"] == ["rel-write_file"]
        assert seen["canary_changed"]
        assert seen["canary_read"]
    finally:
        probe.close()
    assert not Path(probe.dir).exists()


def _reset_call(value: Any) -> Call:
    return Call("reset", returned=True, value=value, value_type=type(value).__name__)


@pytest.mark.parametrize(
    ("value", "passed"),
    [
        (None, True),
        ("Fix report.py", True),
        ([{"type": "text", "text": "Fix report.py"}], True),
        ({"instructions": "Fix report.py"}, False),
        (["Fix report.py"], False),
        (3, False),
    ],
)
def test_reset_returns_none_a_string_or_content_blocks(value: Any, passed: bool) -> None:
    """What TRL can append to the last user message passes; a dict, bare strings in a list, a number fail."""
    case = parse_cases_from_dicts(
        [
            {
                "id": "episode-t",
                "subject": "episode",
                "family": "good",
                "description": "A reset value test case.",
                "episode": {"task_file": "fixtures/episode/weekly-sales/task.json", "script": []},
                "expect": {"reward": 0.0},
            }
        ],
        str(default_cases_dir() / "good.toml"),
    )[0]
    (rule,) = trl_criteria(case, Observation("episode", calls=[_reset_call(value)]))
    assert rule["id"] == "trl-reset-value"
    assert rule["passed"] is passed


def test_a_class_with_no_reward_at_all_is_told_both_ways() -> None:
    """No get_reward() and no env.reward: the hint names both; another AttributeError gets none."""
    missing = Call("get_reward")
    missing.error = {
        "type": "AttributeError",
        "hierarchy": ["AttributeError"],
        "message": "'Env' object has no attribute 'reward'",
    }
    (hint,) = shape_hints(
        Observation("episode", calls=[missing], reward_source="env.reward"), Contract(kind="episode")
    )
    assert "no get_reward() and no 'reward' attribute" in hint
    inner = Call("get_reward")
    inner.error = {**missing.error, "message": "'NoneType' object has no attribute 'kill'"}
    owned = Observation("episode", calls=[inner], reward_source="get_reward()")
    assert shape_hints(owned, Contract(kind="episode")) == []


def test_extra_tools_must_be_public_method_names() -> None:
    """A bad extra_tools value is one ConfigError naming the key, the value and the fix."""
    assert parse_contract({"extra_tools": ["read_file"]}, "episode", "x").extra_tools == ("read_file",)
    with pytest.raises(ConfigError) as info:
        parse_contract({"extra_tools": "read_file"}, "episode", "mypkg.env:Env e2b_contract")
    assert "extra_tools='read_file' is not valid" in str(info.value)
    assert "e.g. ['read_file', 'write_file']" in str(info.value)
    with pytest.raises(ConfigError):
        parse_contract({"extra_tools": ["_private"]}, "episode", "x")


def test_a_repair_step_needs_a_repair_file() -> None:
    """A script with a 'repair' step and no repair file is rejected when the case loads."""
    raw = {
        "id": "episode-t",
        "subject": "episode",
        "family": "lifecycle",
        "description": "A repair step test case.",
        "episode": {"task_file": "fixtures/episode/weekly-sales/task.json", "script": [{"tool": "repair"}]},
        "expect": {"reward": 1.0},
    }
    with pytest.raises(Exception, match="a 'repair' step needs the episode's repair file"):
        parse_cases_from_dicts([raw], str(default_cases_dir() / "lifecycle.toml"))


# ---------------------------------------------------------------- the cases against the samples


@pytest.fixture(scope="module")
def cases() -> dict[str, Any]:
    """The catalog's cases by id."""
    return {c.id: c for c in load_cases([default_cases_dir()])}


def _failed(record: Any) -> list[str]:
    return [c["id"] for c in record.criteria if not c["passed"]]


#: (case, sample, status, the criteria that fail): each case's defect, then the samples it must pass.
TABLE = [
    pytest.param(
        "episode-hostile-tool-arguments",
        "baseline_episode_tools_host_staging:StagingFileToolsEpisode",
        "failed",
        ["host_untouched"],
        id="tool-arguments-catches-host-staging",
    ),
    pytest.param("episode-hostile-tool-arguments", TOOLS, "passed", [], id="tool-arguments-tools"),
    pytest.param(
        "episode-lifecycle-reused-instance",
        "baseline_episode_reward_attr_stale:StaleRewardEpisode",
        "failed",
        ["reward_reads", "released_at_reads", "no-leak"],
        id="reused-instance-catches-stale",
    ),
    pytest.param("episode-lifecycle-reused-instance", REWARD_ATTR, "passed", [], id="reused-instance-attr"),
    pytest.param("episode-lifecycle-reused-instance", TOOLS, "passed", [], id="reused-instance-tools"),
    pytest.param("episode-lifecycle-reused-instance", REFERENCE, "passed", [], id="reused-instance-ref"),
    pytest.param(
        "episode-lifecycle-async-trainer-factory",
        "baseline_episode_home_lambda_factory:make_env",
        "failed",
        ["factory_picklable"],
        id="async-factory-catches-lambda",
    ),
    pytest.param("episode-lifecycle-async-trainer-factory", HOME, "passed", [], id="async-factory-home"),
    pytest.param(
        "episode-good-repair",
        "baseline_episode_home_reset_dict:DictObservationEpisode",
        "failed",
        ["trl-reset-value"],
        id="reset-value-catches-dict",
    ),
    pytest.param("episode-good-repair", REWARD_ATTR, "passed", [], id="good-repair-attr"),
]


@pytest.mark.parametrize(("case_id", "spec", "status", "failing"), TABLE)
def test_each_trl_rule_catches_its_defect_and_passes_correct_code(
    target: Target,
    monkeypatch: pytest.MonkeyPatch,
    cases: dict[str, Any],
    case_id: str,
    spec: str,
    status: str,
    failing: list[str],
) -> None:
    """The defect fails exactly its criteria; correct samples (the reference too) pass; nothing is left."""
    if target.isolation != "namespaces" and cases[case_id].family == "hostile":
        pytest.skip(f"hostile cases need the namespaces level: {target.isolation_reason}")
    monkeypatch.syspath_prepend(str(SAMPLES))
    record = run_case(cases[case_id], load_subject(spec, "episode"), target)
    assert (record.status, _failed(record)) == (status, failing), record.failure_message()
    assert target.alive_ids() == set()


def test_env_reward_is_detected_and_reported(
    target: Target, monkeypatch: pytest.MonkeyPatch, cases: dict[str, Any]
) -> None:
    """No declaration: the class without get_reward() is read as env.reward, and the record says so."""
    monkeypatch.syspath_prepend(str(SAMPLES))
    record = run_case(cases["episode-good-repair"], load_subject(REWARD_ATTR, "episode"), target)
    assert record.status == "passed", record.failure_message()
    assert record.contract is not None
    assert record.contract["reward"] == "env.reward (property)"
    reads = [e for e in record.trajectory if e.get("kind") == "call" and e["name"] == "get_reward"]
    assert [(e["args"]["via"], e["value"]) for e in reads] == [("env.reward (property)", 1.0)]
    owned = run_case(cases["episode-good-repair"], load_subject(HOME, "episode"), target)
    assert owned.contract is not None
    assert owned.contract["reward"] == "get_reward()"


def test_a_lambda_factory_is_policy_and_relaxes_by_name(
    target: Target, monkeypatch: pytest.MonkeyPatch, cases: dict[str, Any]
) -> None:
    """GRPOTrainer takes a lambda: relaxing picklable-factory turns the failure into a named relaxation."""
    monkeypatch.syspath_prepend(str(SAMPLES))
    subject = load_subject("baseline_episode_home_lambda_factory:make_env", "episode")
    record = run_case(
        cases["episode-lifecycle-async-trainer-factory"],
        subject,
        target,
        relax=frozenset({"picklable-factory"}),
    )
    assert record.status == "relaxed", record.failure_message()
    assert record.relaxed == ["picklable-factory"]


def test_the_tool_case_does_not_apply_without_extra_tools(
    target: Target, monkeypatch: pytest.MonkeyPatch, cases: dict[str, Any]
) -> None:
    """A class with only the terminal and submit skips the tool-arguments case, naming why."""
    if target.isolation != "namespaces":
        pytest.skip(f"hostile cases need the namespaces level: {target.isolation_reason}")
    monkeypatch.syspath_prepend(str(SAMPLES))
    record = run_case(cases["episode-hostile-tool-arguments"], load_subject(HOME, "episode"), target)
    assert record.status == "skipped"
    assert record.reason == "not applicable: the class exposes no model tool besides the terminal and submit"
