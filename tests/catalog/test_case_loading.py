"""Case files: parsing, validation errors naming file/case/field, and the bundled catalog."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_e2b_env.catalog.loader import (
    CaseLoadError,
    catalog_hash,
    default_cases_dir,
    load_cases,
    parse_cases,
    parse_cases_from_dicts,
    resolve_path,
)
from pytest_e2b_env.catalog.model import FAMILIES

GOOD = {
    "id": "reward-x",
    "subject": "reward",
    "family": "good",
    "description": "A minimal valid reward case.",
    "reward": {"test_cases": [{"input": "1", "output": "1"}], "completions": [{"text": "x"}]},
    "expect": {"rewards": [0.0]},
}


def _with(**changes: object) -> dict[str, object]:
    case = json.loads(json.dumps(GOOD))
    case.update(changes)
    return case


def test_minimal_case_loads() -> None:
    """A minimal reward case validates, with both modes by default."""
    (case,) = parse_cases_from_dicts([GOOD], "x.toml")
    assert case.id == "reward-x"
    assert case.modes == ["offline", "live"]
    assert case.source_file == "x.toml"


@pytest.mark.parametrize(
    ("changes", "field", "why"),
    [
        ({"id": "Not Kebab"}, "id", "is not kebab-case"),
        ({"family": "flaky"}, "family", "unknown family 'flaky'"),
        ({"expect": {"rewardz": [1.0]}}, "expect", "unknown predicate(s) ['rewardz']"),
        ({"expect": {"reward": 1.0}}, "(case)", "do not apply to reward cases"),
        ({"subject": "episode"}, "(case)", "an episode case needs a [case.episode] table"),
        ({"modes": ["live"]}, "(case)", "needs modes_reason"),
        ({"description": "short"}, "description", "at least 10 characters"),
        ({"colour": "red"}, "colour", "Extra inputs are not permitted"),
    ],
)
def test_malformed_case_names_file_case_and_field(changes: dict[str, object], field: str, why: str) -> None:
    """Every validation error names the file, the case id and the field, with the reason."""
    with pytest.raises(CaseLoadError) as info:
        parse_cases_from_dicts([_with(**changes)], "cases/x.toml")
    message = str(info.value)
    assert message.startswith("cases/x.toml: case ")
    assert f"field {field!r}" in message
    assert why in message


def test_case_without_id_is_numbered() -> None:
    """A case with no id is named by its position."""
    raw = _with()
    del raw["id"]
    with pytest.raises(CaseLoadError, match=r"case #1 \(no id\): field 'id': Field required"):
        parse_cases_from_dicts([raw], "f.toml")


def test_not_toml_and_empty_files() -> None:
    """A file that is not TOML, or holds no [[case]], is rejected naming the file."""
    with pytest.raises(CaseLoadError, match=r"^f.toml: not valid TOML"):
        parse_cases("[[case]\n", "f.toml")
    with pytest.raises(CaseLoadError, match=r"^f.toml: no \[\[case\]\] tables found"):
        parse_cases("", "f.toml")
    with pytest.raises(CaseLoadError, match=r"unknown top-level key\(s\) \['cases'\]"):
        parse_cases("[[cases]]\nid = 1\n", "f.toml")


def test_duplicate_ids_across_files(tmp_path: Path) -> None:
    """Case ids are unique across the whole catalog."""
    text = (default_cases_dir() / "auth.toml").read_text()
    (tmp_path / "a.toml").write_text(text)
    (tmp_path / "b.toml").write_text(text)
    with pytest.raises(CaseLoadError, match=r"field 'id': duplicate, also in"):
        load_cases([tmp_path])


@given(
    st.lists(
        st.from_regex(re.compile(r"[a-z][a-z0-9]{0,6}(-[a-z0-9]{1,6}){0,3}"), fullmatch=True),
        min_size=1,
        max_size=5,
        unique=True,
    ),
    st.sampled_from(FAMILIES),
)
def test_any_kebab_ids_load_in_order(ids: list[str], family: str) -> None:
    """Any unique kebab-case ids load, keep file order, and hash stably."""
    raws = [_with(id=i, family=family) for i in ids]
    cases = parse_cases_from_dicts(raws, "gen.toml")
    assert [c.id for c in cases] == ids
    assert catalog_hash(cases) == catalog_hash(parse_cases_from_dicts(raws, "other.toml"))


# ---- the bundled catalog ------------------------------------------------------------------

MINIMUM = {
    "reward": {
        "good",
        "defect",
        "timeout",
        "hostile",
        "lost-worker",
        "rate-limit",
        "auth",
        "cleanup-failure",
        "lifecycle",
        "live-fault",
    },
    "episode": {
        "good",
        "defect",
        "timeout",
        "lost-worker",
        "cleanup-failure",
        "isolation",
        "lifecycle",
        "live-fault",
    },
}


def test_bundled_catalog_covers_every_family_of_catalog_md() -> None:
    """The bundled catalog has cases for every family catalog.md lists, for both subjects."""
    cases = load_cases([default_cases_dir()])
    present = {kind: {c.family for c in cases if c.subject == kind} for kind in MINIMUM}
    for kind, families in MINIMUM.items():
        assert families <= present[kind], (kind, families - present[kind])


def test_bundled_catalog_is_one_file_per_family() -> None:
    """Each case lives in the file named after its family."""
    for case in load_cases([default_cases_dir()]):
        assert Path(case.source_file).stem == case.family, case.id
        assert case.id.startswith(case.subject + "-"), case.id


def test_bundled_catalog_files_exist() -> None:
    """Every candidate program, text, task and repair file a bundled case names exists."""
    for case in load_cases([default_cases_dir()]):
        named: list[str] = []
        if case.reward is not None:
            items = case.reward.completions + (case.reward.second_batch or [])
            named += [p for c in items for p in (c.program, c.text_file) if p]
            if case.reward.task:
                named.append(case.reward.tasks_file)
        if case.episode is not None:
            named += [p for p in (case.episode.task_file, case.episode.repair) if p]
            steps = case.episode.script + [s for lane in case.episode.lanes or [] for s in lane]
            named += [s.source for s in steps if s.source]
        for relative in named:
            assert resolve_path(case, relative).is_file()
