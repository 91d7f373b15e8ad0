"""`pytest-e2b-env validate`: the project's config, only the catalog, clean names and four exit codes."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest

from pytest_e2b_env.cli.validate import EXIT_CODES, build_parser, pytest_args

PLUGIN_TESTS = Path(__file__).resolve().parents[1] / "plugin"
sys.path.insert(0, str(PLUGIN_TESTS))
from plugin_helpers import only_bundle, read_json, write_project  # noqa: E402


def _validate(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    """The console command, as a user runs it, in the project directory (bounded)."""
    return pytester.run(sys.executable, "-m", "pytest_e2b_env.cli", "validate", *args, timeout=240)


def test_validate_passes_options_through_to_the_plugin() -> None:
    """--run-id, --output, --summary and -k reach the plugin as its own options; nothing else is forced."""
    options = build_parser().parse_args(
        ["--run-id", "ci-77", "--output", "ev", "--summary", "s.md", "-k", "auth"]
    )
    args = pytest_args(options)
    assert args[args.index("--e2b-run-id") + 1] == "ci-77"
    assert args[args.index("--e2b-evidence") + 1] == str(Path("ev").resolve())
    assert args[args.index("--e2b-summary") + 1] == str(Path("s.md").resolve())
    assert args[args.index("-k") + 1] == "auth"
    assert "--e2b-cases" not in args
    assert "-c" not in args


def test_exit_codes_cover_every_pytest_status() -> None:
    """Every pytest exit status maps to one of validate's four codes."""
    assert {int(code): EXIT_CODES[int(code)] for code in pytest.ExitCode} == {
        0: 0,
        1: 1,
        2: 3,
        3: 3,
        4: 2,
        5: 2,
        6: 1,
    }


@pytest.mark.full
def test_validate_runs_the_projects_catalog_only(pytester: pytest.Pytester) -> None:
    """The project's ini (pythonpath, subject, cases) is read, its own tests are not run, names are clean."""
    write_project(pytester)
    pytester.makepyfile(test_own="def test_own():\n    raise AssertionError('not validate\\'s job')\n")
    result = _validate(pytester, "--summary", "summary.md")
    assert result.ret == 0, result.outlines[-20:]
    result.stdout.fnmatch_lines(
        ["e2b subjects: reward=tinyreward:make_reward", "e2b-catalog::reward-tiny-correct PASSED*"]
    )
    out = result.stdout.str() + result.stderr.str()
    assert "test_own" not in out
    assert "../" not in out
    assert "PytestAssertRewriteWarning" not in out
    bundle = only_bundle(pytester.path / "e2b-evidence")
    assert read_json(bundle / "run-manifest.json")["subjects"] == {
        "reward": "tinyreward:make_reward",
        "episode": None,
    }
    assert (pytester.path / "summary.md").read_text().startswith("## ✅ pytest-e2b-env: PASSED")


@pytest.mark.full
def test_validate_on_xdist_workers_runs_the_controllers_subject(pytester: pytest.Pytester) -> None:
    """-n 2: the workers run the subject validate chose and skip the project's test files too."""
    write_project(pytester)
    pytester.makepyfile(test_own="def test_own():\n    raise AssertionError('not validate\\'s job')\n")
    result = _validate(pytester, "--reward-subject", "tinyreward:constant_reward", "-n", "2", "-q")
    assert result.ret == 1, result.outlines[-20:]
    result.stdout.fnmatch_lines(["*2 failed in*"])  # constant 1.0 scores fail both; test_own never ran
    bundle = only_bundle(pytester.path / "e2b-evidence")
    coverage = read_json(bundle / "coverage.json")
    assert {c["id"]: c["status"] for c in coverage["cases"]} == {
        "reward-tiny-correct": "failed",
        "reward-tiny-no-fence": "failed",
    }


@pytest.mark.full
def test_validate_named_subject_runs_alone(pytester: pytest.Pytester) -> None:
    """--reward-subject replaces the configured one; a failing case exits 1."""
    write_project(pytester)
    result = _validate(pytester, "--reward-subject", "tinyreward:constant_reward", "-q")
    assert result.ret == 1
    bundle = only_bundle(pytester.path / "e2b-evidence")
    manifest = read_json(bundle / "run-manifest.json")
    assert manifest["subjects"] == {"reward": "tinyreward:constant_reward", "episode": None}


@pytest.mark.full
def test_validate_usage_errors_exit_2(pytester: pytest.Pytester) -> None:
    """A bad flag, a kind with no subject, a -k matching nothing: exit 2 with the reason."""
    write_project(pytester)
    bad_flag = _validate(pytester, "--no-such-flag")
    assert bad_flag.ret == 2
    bad_flag.stderr.fnmatch_lines(["*error: unrecognized arguments: --no-such-flag"])
    no_episode = _validate(pytester, "--subject", "episode")
    assert no_episode.ret == 2
    no_episode.stderr.fnmatch_lines(
        ["ERROR: --subject episode: no episode subject is set; name one with --episode-subject MODULE:ATTR*"]
    )
    nothing = _validate(pytester, "-k", "no-such-case", "-q")
    assert nothing.ret == 2


@pytest.mark.full
def test_validate_internal_error_exits_3(pytester: pytest.Pytester) -> None:
    """A crash inside the pytest run (here a project hook raising) is exit 3, not a case failure."""
    write_project(pytester)
    pytester.makeconftest(
        textwrap.dedent(
            """
            def pytest_collection_finish(session):
                raise RuntimeError("hook crashed")
            """
        )
    )
    result = _validate(pytester, "-q")
    assert result.ret == 3
    assert "INTERNALERROR" in result.stdout.str() + result.stderr.str()


def test_console_script_without_a_command_is_a_usage_error(pytester: pytest.Pytester) -> None:
    """`pytest-e2b-env` alone prints the usage to stderr and exits 2; --version prints the version."""
    bare = pytester.run(sys.executable, "-m", "pytest_e2b_env.cli", timeout=60)
    assert bare.ret == 2
    bare.stderr.fnmatch_lines(["usage: pytest-e2b-env [--version] COMMAND [ARGS...]"])
    version = pytester.run(sys.executable, "-m", "pytest_e2b_env.cli", "--version", timeout=60)
    assert version.ret == 0
    from pytest_e2b_env import __version__

    assert version.stdout.lines == [f"pytest-e2b-env {__version__}"]


@pytest.mark.slow
def test_validate_reward_auth_case(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With no subject configured anywhere, validate runs the bundled reference code."""
    from pytest_e2b_env.cli.validate import main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "pytest.ini").write_text("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    assert main(["--subject", "reward", "-k", "auth", "--output", "ev", "-q"]) == 0
    (bundle,) = [p for p in (tmp_path / "ev").iterdir() if p.is_dir()]
    coverage = json.loads((bundle / "coverage.json").read_text())
    assert coverage["complete"]
    assert coverage["passed"]
    assert [c["id"] for c in coverage["cases"]] == ["reward-auth-401"]
    manifest = json.loads((bundle / "run-manifest.json").read_text())
    assert manifest["subjects"] == {"reward": "pytest_e2b_env.reward:reward_subject", "episode": None}
