"""Each defective sample subject under fixtures/subjects is caught by the family meant for it."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_e2b_env.catalog.catch import constants, run_subject

SUBJECTS = sorted(
    p
    for p in (Path(__file__).resolve().parents[2] / "fixtures" / "subjects").glob("*.py")
    if p.stem.startswith(("reward_", "episode_"))
)


def test_every_sample_declares_its_bug_and_family() -> None:
    """Every sample names its bug and a catalog family that exists."""
    from pytest_e2b_env.catalog.model import FAMILIES

    assert len([p for p in SUBJECTS if p.stem.startswith("reward_")]) >= 8
    assert len([p for p in SUBJECTS if p.stem.startswith("episode_")]) >= 8
    for path in SUBJECTS:
        meta = constants(path)
        assert meta.get("BUG"), path.name
        assert meta.get("CAUGHT_BY") in FAMILIES, path.name


@pytest.mark.slow
@pytest.mark.parametrize("path", SUBJECTS, ids=[p.stem for p in SUBJECTS])
def test_sample_is_caught_by_its_family(path: Path) -> None:
    """Running the sample's CAUGHT_BY family fails at least one case of that family."""
    family = str(constants(path)["CAUGHT_BY"])
    catch = run_subject(path, families=[family], timeout=300)
    assert catch.problem is None, catch.problem
    assert catch.caught, f"{path.stem} ({catch.bug}) was not caught by {family}: failed {catch.failed_cases}"
