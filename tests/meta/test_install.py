"""The built wheel works where users put it: a fresh venv, ``--user``, ``--target``, editable, a checkout.

Slow: each test installs into a temporary directory (removed afterwards) from the package index.
The user project lives outside the checkout and runs with ``PYTHONPATH`` unset, so only the
installed package can answer.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from install_helpers import (
    INSTALL_TIMEOUT,
    PROBE,
    ROOT,
    base_python,
    build_wheel,
    clean_env,
    copy_sources,
    make_venv,
    run,
)

pytestmark = pytest.mark.slow

PROJECT_INI = """\
[pytest]
pythonpath = .
e2b_reward_subject = mine.rewards:make_reward
"""
# A user's reward module that re-exports the bundled pool: the subject under test is installed code.
REWARDS = "from pytest_e2b_env.reward import reward_subject as make_reward\n"


@pytest.fixture(scope="module")
def work() -> Iterator[Path]:
    """One scratch directory for the module's installs, removed at the end (venvs are large)."""
    path = Path(tempfile.mkdtemp(prefix="pytest-e2b-env-install-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def wheel(work: Path) -> Path:
    """The project's wheel, built once from a copy of the checkout."""
    return build_wheel(work / "wheel")


def _project(root: Path) -> Path:
    """A user project with the two ini lines and its own package, outside any checkout."""
    (root / "mine").mkdir(parents=True)
    (root / "mine" / "__init__.py").write_text("")
    (root / "mine" / "rewards.py").write_text(REWARDS)
    (root / "pytest.ini").write_text(PROJECT_INI)
    return root


def _probe(python: str | Path, cwd: Path, **env: str) -> dict[str, object]:
    done = run([python, "-c", PROBE], cwd=cwd, env=clean_env(**env))
    assert done.returncode == 0, done.stderr[-3000:]
    found: dict[str, object] = json.loads(done.stdout)
    return found


def _check_bundle(project: Path, verify: list[str | Path], env: dict[str, str]) -> dict[str, object]:
    (bundle,) = [p for p in (project / "e2b-evidence").iterdir() if p.is_dir()]
    checked = run([*verify, bundle], cwd=project, env=env)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    manifest: dict[str, object] = json.loads((bundle / "run-manifest.json").read_text())
    return manifest


def test_fresh_venv_runs_the_catalog_from_the_wheel(work: Path, wheel: Path) -> None:
    """pip install of the wheel alone: pytest in a user project writes a verified bundle; extras are named."""
    python = make_venv(work / "venv")
    installed = run(
        [python, "-m", "pip", "install", "-q", wheel], cwd=work, env=clean_env(), timeout=INSTALL_TIMEOUT
    )
    assert installed.returncode == 0, installed.stderr[-3000:]
    project = _project(work / "project-venv")
    env = clean_env()
    found = _probe(python, project)
    site = Path(str(found["package"])).parent
    assert found["data"] == str(site / "_data")
    assert "auth.toml" in found["cases"]  # type: ignore[operator]
    no_openenv = run(
        [python, "-c", "import importlib.util as u; print(u.find_spec('openenv'))"], cwd=project, env=env
    )
    assert no_openenv.stdout.strip() == "None"  # the base install stays light

    ran = run([python, "-m", "pytest", "-k", "auth", "-p", "no:cacheprovider"], cwd=project, env=env)
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    assert (
        "e2b-catalog::reward-auth-401"
        in run([python, "-m", "pytest", "-k", "auth", "--collect-only", "-q"], cwd=project, env=env).stdout
    )
    manifest = _check_bundle(project, [work / "venv" / "bin" / "pytest-e2b-env", "verify-evidence"], env)
    sources = manifest["subject_sources"]
    assert sources["reward"]["module_file"] == str(project / "mine" / "rewards.py")  # type: ignore[index]

    episode = run(
        [python, "-m", "pytest", "-o", "e2b_episode_subject=pytest_e2b_env.episode:ReportEpisode"],
        cwd=project,
        env=env,
    )
    assert episode.returncode == 4
    assert (
        "needs the [episode] extra (openenv not installed): pip install 'pytest-e2b-env[episode]'"
        in episode.stderr
    )
    cli = work / "venv" / "bin" / "pytest-e2b-env"
    train = run([cli, "train", "--tiny", "--offline", "--cpu"], cwd=project, env=env)
    assert train.returncode == 2
    assert "needs the [train] extra" in train.stderr
    workers = run([cli, "validate", "-n", "2"], cwd=project, env=env)
    assert workers.returncode == 2
    assert "-n 2 needs pytest-xdist, which is not installed: pip install pytest-xdist" in workers.stderr
    validated = run([cli, "validate", "-k", "auth", "-q", "--output", "validate-ev"], cwd=project, env=env)
    assert validated.returncode == 0, validated.stdout[-3000:] + validated.stderr[-3000:]
    # The console script imports the package before pytest marks the wheel's modules for rewriting.
    assert "PytestAssertRewriteWarning" not in validated.stdout + validated.stderr

    empty = work / "empty"
    empty.mkdir()
    reference = run([cli, "validate", "-k", "auth"], cwd=empty, env=env)
    assert reference.returncode == 0, reference.stdout[-3000:] + reference.stderr[-3000:]
    assert "e2b subjects: reward=pytest_e2b_env.reward:reward_subject\n" in reference.stdout
    episode_only = run([cli, "validate", "--subject", "episode"], cwd=empty, env=env)
    assert episode_only.returncode == 2
    assert "needs the [episode] extra" in episode_only.stderr

    # An episode over the e2b SDK alone (no OpenEnv) is validated by the base install.
    plain = work / "plain-episode"
    plain.mkdir()
    shutil.copy2(ROOT / "fixtures" / "subjects" / "baseline_episode_home.py", plain / "plain_episode.py")
    (plain / "pytest.ini").write_text(
        "[pytest]\npythonpath = .\nasyncio_default_fixture_loop_scope = function\n"
    )
    ran_plain = run(
        [
            cli,
            "validate",
            "--episode-subject",
            "plain_episode:RepairEpisode",
            "--relax",
            "lost-create-recovery",
        ],
        cwd=plain,
        env=env,
    )
    assert ran_plain.returncode == 0, ran_plain.stdout[-3000:] + ran_plain.stderr[-3000:]
    assert "failed" not in ran_plain.stdout.splitlines()[-1]


def test_user_install_runs_the_catalog(work: Path, wheel: Path) -> None:
    """pip install --user: the data is found in the user site and the catalog runs from there."""
    userbase = work / "userbase"
    env = clean_env(PYTHONUSERBASE=str(userbase))
    python = base_python()
    installed = run(
        [python, "-m", "pip", "install", "--user", "-q", wheel], cwd=work, env=env, timeout=INSTALL_TIMEOUT
    )
    assert installed.returncode == 0, installed.stderr[-3000:]
    project = _project(work / "project-user")
    found = _probe(python, project, PYTHONUSERBASE=str(userbase))
    assert str(found["package"]).startswith(str(userbase))
    assert str(found["data"]).startswith(str(userbase))
    assert str(found["data"]).endswith("_data")
    ran = run([python, "-m", "pytest", "-k", "auth", "-p", "no:cacheprovider"], cwd=project, env=env)
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    _check_bundle(project, [python, "-m", "pytest_e2b_env.cli", "verify-evidence"], env)


def _check_docs_command(target: Path, cwd: Path) -> None:
    """The console script of a --target install prints the docs the wheel carries, every page of them."""
    env = clean_env(PYTHONPATH=str(target))
    shipped = target / "pytest_e2b_env" / "_data" / "docs"
    pages = sorted(p.stem for p in (ROOT / "docs").glob("*.md"))
    assert sorted(p.stem for p in shipped.glob("*.md")) == pages
    listed = run([target / "bin" / "pytest-e2b-env", "docs"], cwd=cwd, env=env)
    assert listed.returncode == 0, listed.stderr[-3000:]
    assert [line.split()[0] for line in listed.stdout.splitlines()[2 : 2 + len(pages)]] == pages
    assert listed.stdout.rstrip().endswith(f"The pages are Markdown files in {shipped}")
    page = run([target / "bin" / "pytest-e2b-env", "docs", "plugin"], cwd=cwd, env=env)
    assert page.returncode == 0, page.stderr[-3000:]
    assert page.stdout == (ROOT / "docs" / "plugin.md").read_text(encoding="utf-8")
    unknown = run([target / "bin" / "pytest-e2b-env", "docs", "nope"], cwd=cwd, env=env)
    assert unknown.returncode == 2
    assert "known topics: architecture, catalog," in unknown.stderr


def test_target_editable_and_checkout_layouts_find_the_data(work: Path, wheel: Path) -> None:
    """--target plus PYTHONPATH reads the package data (docs too); editable and checkouts read the sources."""
    target = work / "target"
    done = run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", target, wheel],
        cwd=work,
        env=clean_env(),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    found = _probe(sys.executable, work, PYTHONPATH=str(target))
    assert found["package"] == str(target / "pytest_e2b_env" / "__init__.py")
    assert found["data"] == str(target / "pytest_e2b_env" / "_data")
    _check_docs_command(target, work)

    src = copy_sources(work / "editable-src")
    python = make_venv(work / "editable-venv")
    done = run(
        [python, "-m", "pip", "install", "--no-deps", "-q", "-e", src],
        cwd=work,
        env=clean_env(),
        timeout=INSTALL_TIMEOUT,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    found = _probe(python, work)
    assert found["package"] == str(src / "pytest_e2b_env" / "__init__.py")
    assert found["data"] == str(src)

    found = _probe(sys.executable, work, PYTHONPATH=str(src))
    assert found["data"] == str(src)
    assert found["cases"] == sorted(p.name for p in (src / "cases").glob("*.toml"))
