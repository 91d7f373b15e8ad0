"""Below the namespaces isolation level, hostile and isolation cases never run on the host."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from pytest_e2b_env.catalog.contract import load_subject
from pytest_e2b_env.catalog.loader import load_cases
from pytest_e2b_env.catalog.runner import run_case
from pytest_e2b_env.data import cases_dir
from pytest_e2b_env.emulator import Emulator
from pytest_e2b_env.settings import TargetSettings, new_run_id
from pytest_e2b_env.targets import Target

SPECS = {"reward": "pytest_e2b_env.reward:reward_subject", "episode": "catalog_subjects:TinyEpisode"}


@pytest.fixture(scope="module")
def process_target() -> Iterator[Target]:
    """An emulator forced to the plain-process level (what a non-root run gets)."""
    emulator = Emulator(isolation="process")
    emulator.__enter__()
    try:
        yield Target(emulator, TargetSettings(run_id=new_run_id()))
    finally:
        emulator.__exit__(None, None, None)


@pytest.mark.parametrize("family", ["hostile", "isolation"])
def test_attack_cases_are_skipped_with_the_level_and_run_nothing(process_target: Target, family: str) -> None:
    """Each hostile/isolation case is a named skip at isolation=process and creates no sandbox."""
    cases = [c for c in load_cases([cases_dir()]) if c.family == family]
    assert cases
    mark = process_target.ledger_mark()
    for case in cases:
        spec = (
            "pytest_e2b_env.reward:reward_subject"
            if case.subject == "reward"
            else "catalog_subjects:TinyEpisode"
        )
        record = run_case(case, load_subject(spec, case.subject), process_target)
        assert record.status == "skipped", record.failure_message()
        assert record.reason is not None
        assert "needs the emulator's namespaces isolation level, got 'process" in record.reason
    assert process_target.ledger(since=mark) == []


def test_a_subject_that_needs_isolation_is_skipped_below_it(process_target: Target) -> None:
    """The reference pool declares ``needs_isolation``: at isolation=process each of its cases is a named
    skip with the level's reason, never a failure, and none creates a sandbox."""
    subject = load_subject(SPECS["reward"], "reward")
    assert subject.contract.needs_isolation
    cases = [c for c in load_cases([cases_dir()]) if c.subject == "reward" and c.family == "good"]
    assert cases
    mark = process_target.ledger_mark()
    for case in cases:
        record = run_case(case, subject, process_target)
        assert record.status == "skipped", record.failure_message()
        assert record.reason is not None
        assert "contract 'needs_isolation'" in record.reason
        assert "'process' (plain-process level" in record.reason  # the level's own reason follows
    assert process_target.ledger(since=mark) == []


def test_needs_isolation_takes_a_boolean() -> None:
    """A non-boolean ``needs_isolation`` is one ConfigError naming the key and the fix."""
    from pytest_e2b_env.catalog.contract import parse_contract
    from pytest_e2b_env.errors import ConfigError

    with pytest.raises(ConfigError, match=r"needs_isolation='yes' is not valid; give true or false"):
        parse_contract({"needs_isolation": "yes"}, "reward", "here")
