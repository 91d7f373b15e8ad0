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
