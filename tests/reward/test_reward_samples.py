"""The defective sample reward subjects: well-formed, and their bugs are real (shown on the emulator)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from reward_helpers import ROOT, TOTAL, completion, program

from pytest_e2b_env.emulator import Emulator
from pytest_e2b_env.reward import reward_subject

SUBJECTS = sorted((ROOT / "fixtures" / "subjects").glob("reward_*.py"))
FAMILIES = {
    "good",
    "defect",
    "timeout",
    "hostile",
    "lost-worker",
    "rate-limit",
    "auth",
    "cleanup-failure",
    "lifecycle",
}


def load(path: Path) -> ModuleType:
    """Import a sample subject from its file."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_there_are_at_least_eight() -> None:
    """At least eight defective reward subjects ship."""
    assert len(SUBJECTS) >= 8


@pytest.mark.parametrize("path", SUBJECTS, ids=lambda p: p.stem)
def test_sample_declares_its_bug(path: Path) -> None:
    """Each sample names its one bug and the catalog family meant to catch it, and has factory()."""
    module = load(path)
    assert isinstance(module.BUG, str)
    assert module.BUG.endswith(".")
    assert module.CAUGHT_BY in FAMILIES
    assert callable(module.factory())


@pytest.fixture
def sdk_env(emulator: Emulator, runner_supported: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """Point the e2b SDK at the emulator through its environment, as the plugin does."""
    for key, value in emulator.sdk_env().items():
        monkeypatch.setenv(key, value)


async def score_with_sample(stem: str, name: str, cases: Any) -> float:
    reward = load(ROOT / "fixtures" / "subjects" / f"{stem}.py").factory()
    return (await reward([completion(program(name))], [cases]))[0]


async def score_with_reference(name: str, cases: Any) -> float:
    async with reward_subject() as reward:
        return (await reward([completion(program(name))], [cases]))[0]


@pytest.mark.parametrize(
    ("stem", "name"),
    [
        ("reward_uploads_expected", "read_expectations"),
        ("reward_accepts_float_for_int", "type_confusion_float"),
    ],
)
async def test_sample_bug_rewards_a_cheat_the_reference_zeroes(sdk_env: None, stem: str, name: str) -> None:
    """The bug is real: the sample rewards a hostile program that the reference pool scores 0."""
    assert await score_with_sample(stem, name, TOTAL) > 0.0
    assert await score_with_reference(name, TOTAL) == 0.0


async def test_sample_baseline_scores_correct(sdk_env: None) -> None:
    """Apart from its bug, a sample scores the correct program 1.0 (the baseline works)."""
    assert await score_with_sample("reward_scores_out_of_order", "total_tokens_correct", TOTAL) == 1.0
