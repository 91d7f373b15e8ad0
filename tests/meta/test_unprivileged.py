"""As a user who is not root, from the wheel: the catalog, the isolation battery, no user namespaces."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from unprivileged_helpers import Account, fresh_account, missing_prerequisite

from pytest_e2b_env.catalog.loader import default_cases_dir, load_cases

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def account() -> Iterator[Account]:
    """A fresh account with subordinate ids and the project's wheel in a venv it can run."""
    why = missing_prerequisite()
    if why:
        pytest.skip(why)
    with fresh_account() as made:
        yield made


def _bundle(output: Path) -> Path:
    (bundle,) = [p for p in output.iterdir() if p.is_dir()]
    return bundle


def test_the_whole_catalog_passes_at_full_isolation(account: Account) -> None:
    """validate in an empty directory, as the account: every bundled case passes, none is skipped for
    isolation, and the header says the namespaces level (rootless)."""
    project = account.directory("project")
    done = account.run(
        [account.python.parent / "pytest-e2b-env", "validate", "--output", project / "ev"], project
    )
    assert done.returncode == 0, (done.stdout[-6000:], done.stderr[-3000:])
    assert "isolation=namespaces" in done.stdout
    assert "namespaces level: rootless: host uid" in done.stdout
    coverage = json.loads((_bundle(project / "ev") / "coverage.json").read_text())
    statuses = [c["status"] for c in coverage["cases"]]
    assert len(statuses) == len(load_cases([default_cases_dir()]))
    # Every case passes, but one the reference has nothing for (a case for extra model tools):
    # skipped as not applicable, never for isolation.
    others = [c for c in coverage["cases"] if c["status"] != "passed"]
    assert all(c["status"] == "skipped" and c["reason"].startswith("not applicable") for c in others), others
    manifest = json.loads((_bundle(project / "ev") / "run-manifest.json").read_text())
    assert manifest["isolation"] == "namespaces"
    assert "rootless" in manifest["isolation_reason"]


BATTERY = [
    "tests/emulator/test_isolation_namespaces.py",
    "tests/emulator/test_isolation_hardening.py",
    "tests/emulator/test_isolation_api.py",
    "tests/emulator/test_isolation_bounds.py",
    "tests/emulator/test_emu_quota.py",
    "tests/reward/test_reward_isolation.py",
]


def test_the_isolation_quota_and_hostile_tests_pass_as_that_user(account: Account) -> None:
    """The emulator's isolation and quota tests and the reward pool's hostile battery run as the account,
    in the user namespace the emulator's own process enters; each says what the level gives."""
    suite = account.directory("suite")
    for part in ("tests", "fixtures", "cases"):
        shutil.copytree(ROOT / part, suite / part, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy2(ROOT / "pyproject.toml", suite / "pyproject.toml")
    basetemp = account.directory("basetemp")
    done = account.run(
        [
            account.python,
            account.work / "in_namespace.py",
            "-p",
            "no:cacheprovider",
            "-q",
            "-rs",
            f"--basetemp={basetemp}/t",
            *BATTERY,
        ],
        suite,
        timeout=1500,
    )
    assert done.returncode == 0, done.stdout[-8000:] + done.stderr[-2000:]
    assert " passed" in done.stdout


def test_without_user_namespaces_the_run_says_why_and_fails_nothing(account: Account) -> None:
    """Where user namespaces are off (here: user.max_user_namespaces = 0 in an enclosing namespace),
    one header line names the cause and the fix, every case needing isolation is skipped with it, and
    nothing fails: the bundled code passes or is skipped."""
    project = account.directory("project-off")
    done = account.run(
        [account.python.parent / "pytest-e2b-env", "validate", "--output", project / "ev"],
        project,
        wrap=account.without_user_namespaces(),
    )
    assert done.returncode == 0, (done.stdout[-6000:], done.stderr[-3000:])
    cause = (
        "user namespaces are disabled (user.max_user_namespaces = 0): "
        "sudo sysctl -w user.max_user_namespaces=15000, or run as root"
    )
    header = [
        line for line in done.stdout.splitlines() if line.startswith("e2b: hostile and isolation cases")
    ]
    assert len(header) == 1
    assert cause in header[0]
    coverage = json.loads((_bundle(project / "ev") / "coverage.json").read_text())
    by_status: dict[str, list[str]] = {}
    for case in coverage["cases"]:
        by_status.setdefault(case["status"], []).append(case["id"])
    assert set(by_status) <= {"passed", "skipped"}, by_status
    skipped = [c for c in coverage["cases"] if c["status"] == "skipped"]
    assert all(cause in (c.get("reason") or "") for c in skipped if c["family"] in ("hostile", "isolation"))
    assert {c["family"] for c in skipped} >= {"hostile", "isolation"}
