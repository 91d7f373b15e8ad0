"""The pure parts: checksums, record normalisation and bounding, run facts (git, argv, versions)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_e2b_env.evidence.checksums import check_sums, sha256_file, write_sums
from pytest_e2b_env.evidence.records import bound, bound_text, file_stem, normalize_case, normalize_cleanup
from pytest_e2b_env.evidence.runinfo import git_state, package_versions, safe_argv, utc_now


def test_sums_cover_every_file_but_themselves(tmp_path):
    """SHA256SUMS lists every other file, sorted, in `sha256sum -c` format."""
    (tmp_path / "a").write_text("1")
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "b").write_text("2")
    sums = write_sums(tmp_path).read_text().splitlines()
    assert sums == [f"{sha256_file(tmp_path / 'a')}  a", f"{sha256_file(tmp_path / 'd' / 'b')}  d/b"]
    assert check_sums(tmp_path) == []
    result = subprocess.run(["sha256sum", "-c", "SHA256SUMS"], cwd=tmp_path, capture_output=True, check=False)
    assert result.returncode == 0


def test_malformed_sums_line(tmp_path):
    """A malformed SHA256SUMS line is reported with its number."""
    (tmp_path / "a").write_text("1")
    write_sums(tmp_path)
    with (tmp_path / "SHA256SUMS").open("a") as handle:
        handle.write("nonsense\n")
    assert check_sums(tmp_path) == ["SHA256SUMS line 2 is malformed: 'nonsense'"]


@settings(max_examples=200, deadline=None)
@given(ids=st.lists(st.text(min_size=1, max_size=30), min_size=1, max_size=8))
def test_file_stems_are_safe_and_unique(ids):
    """Any case ids map to distinct, plain file names."""
    taken: set[str] = set()
    stems = [file_stem(case_id, taken) for case_id in ids]
    assert len(set(stems)) == len(stems)
    for stem in stems:
        assert re.fullmatch(r"[A-Za-z0-9._~-]+", stem)
        assert stem not in (".", "..")
        assert not stem.startswith(".")


@settings(max_examples=200, deadline=None)
@given(text=st.text(max_size=400), limit=st.integers(min_value=10, max_value=200))
def test_bound_text_keeps_head_and_tail(text, limit):
    """Bounded text is short text unchanged, or head + visible note + tail within the limit."""
    out = bound_text(text, limit)
    if len(text) <= limit:
        assert out == text
    else:
        keep = limit // 2
        assert out.startswith(text[:keep])
        assert out.endswith(text[-keep:])
        assert "characters truncated" in out


def test_bound_makes_json_safe_values():
    """bound turns tuples, sets, bytes, NaN and objects into JSON-safe values and cuts long lists."""
    out = bound({"t": (1, 2), "b": b"ok", "n": float("inf"), 3: None, "l": list(range(6000))})
    assert out["t"] == [1, 2]
    assert out["b"] == "ok"
    assert out["n"] == "inf"
    assert out["3"] is None
    assert len(out["l"]) == 5001
    assert out["l"][-1] == "[... 1000 more items truncated ...]"


def test_normalize_case_fills_every_field():
    """A minimal record gets every contract field; extra fields are kept."""
    record, problems = normalize_case({"id": "x", "status": "passed", "custom": 1}, 1)
    assert problems == []
    assert record["custom"] == 1
    assert record["criteria"] == []
    assert record["exceptions"] == []
    assert record["rewards"] is None
    assert (record["attempts"], record["retries"]) == (1, 0)
    assert (record["subject"], record["family"]) == ("unknown", "unknown")


def test_normalize_non_dict_record():
    """A record that is not a dict is kept as an error record with a problem."""
    record, problems = normalize_case(["oops"], 3)
    assert record["id"] == "invalid-record-3"
    assert record["status"] == "error"
    assert problems == ["case record #3 is a list, not a dict; kept as text"]


def test_cleanup_status():
    """Cleanup records get a status: confirmed_absent, error (gone or not) or unconfirmed."""
    assert normalize_cleanup({"sandbox_id": "a", "confirmed_absent_at": "t"})["status"] == "confirmed_absent"
    assert normalize_cleanup({"sandbox_id": "a", "error": "500"})["status"] == "error"
    assert normalize_cleanup({"sandbox_id": "a"})["status"] == "unconfirmed"
    leaked = {"sandbox_id": "a", "error": "leaked", "confirmed_absent_at": "t"}
    assert normalize_cleanup(leaked)["status"] == "error_confirmed_absent"


def _git(repo: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo, check=True, capture_output=True
    )


def test_git_state_head_and_dirty_digest(tmp_path):
    """git_state names HEAD, and the dirty digest changes with uncommitted content."""
    assert git_state(tmp_path)["head"] is None
    _git(tmp_path, "init", "-q")
    (tmp_path / "f").write_text("1")
    _git(tmp_path, "add", "f")
    _git(tmp_path, "commit", "-q", "-m", "c")
    clean = git_state(tmp_path)
    assert re.fullmatch(r"[0-9a-f]{40}", clean["head"])
    assert clean["dirty"] is False
    assert clean["dirty_digest"] is None
    (tmp_path / "f").write_text("2")
    first = git_state(tmp_path)
    (tmp_path / "f").write_text("3")
    second = git_state(tmp_path)
    assert first["dirty"] is True
    assert first["dirty_digest"] != second["dirty_digest"]


def test_safe_argv_hides_option_values():
    """The value after a credential-named option is replaced; other arguments stay."""
    assert safe_argv(["pytest", "--api-key", "v", "--e2b-live", "-k", "x", "--token", "t"]) == [
        "pytest",
        "--api-key",
        "[REDACTED]",
        "--e2b-live",
        "-k",
        "x",
        "--token",
        "[REDACTED]",
    ]


def test_versions_and_time():
    """Installed versions are read without importing; absent ones are None; times are UTC ISO."""
    versions = package_versions(("pytest", "surely-not-installed-dist"))
    assert versions["pytest"]
    assert versions["surely-not-installed-dist"] is None
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", utc_now())
