"""`pytest-e2b-env validate` runs the catalog against the reference code and writes the bundle."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_e2b_env.cli.validate import build_parser, pytest_args


def test_validate_builds_a_catalog_only_pytest_run(tmp_path: Path) -> None:
    """The pytest command line points both subjects at the reference and collects only cases."""
    options = build_parser().parse_args(
        ["--subject", "reward", "--output", str(tmp_path / "ev"), "-k", "auth"]
    )
    args = pytest_args(options, tmp_path)
    assert "e2b_reward_subject=pytest_e2b_env.reward:reward_subject" in args
    assert "e2b_episode_subject=" in args
    assert args[args.index("--e2b-evidence") + 1] == str((tmp_path / "ev").resolve())
    assert args[args.index("-k") + 1] == "auth"


def test_validate_passes_the_run_id_as_an_option(tmp_path: Path) -> None:
    """--run-id reaches the plugin as its --e2b-run-id option (not through os.environ)."""
    options = build_parser().parse_args(["--run-id", "ci-77"])
    args = pytest_args(options, tmp_path)
    assert args[args.index("--e2b-run-id") + 1] == "ci-77"


def test_validate_rejects_unknown_subject_kind() -> None:
    """--subject accepts reward, episode or all."""
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--subject", "both"])


@pytest.mark.slow
def test_validate_reward_auth_case(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """validate --subject reward -k auth passes the auth case and writes one complete bundle."""
    from pytest_e2b_env.cli.validate import main

    monkeypatch.chdir(tmp_path)
    assert main(["--subject", "reward", "-k", "auth", "--output", "ev", "-q"]) == 0
    (bundle,) = [p for p in (tmp_path / "ev").iterdir() if p.is_dir()]
    coverage = json.loads((bundle / "coverage.json").read_text())
    assert coverage["complete"]
    assert coverage["passed"]
    assert [c["id"] for c in coverage["cases"]] == ["reward-auth-401"]
