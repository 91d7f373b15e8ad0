"""Options, ini keys, usage errors, skips and the report header, through pytester."""

from __future__ import annotations

from typing import Any

import pytest

INI = "[pytest]\nasyncio_default_fixture_loop_scope = function\n"


@pytest.fixture(autouse=True)
def _quiet_asyncio(pytester: pytest.Pytester) -> None:
    """Inner runs set the asyncio loop scope so pytest-asyncio does not warn."""
    pytester.makeini(INI)


def test_help_lists_the_e2b_options(pytester: pytest.Pytester) -> None:
    """--help shows --e2b-live, --e2b-evidence, --e2b-cases and the subject ini keys."""
    result = pytester.runpytest("--help")
    result.stdout.fnmatch_lines(
        [
            "*--e2b-live*",
            "*--e2b-evidence=DIR*",
            "*--e2b-cases=PATH*",
            "*e2b_reward_subject*",
            "*e2b_episode_tools*",
        ]
    )


def test_live_without_key_is_a_usage_error(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--e2b-live without E2B_API_KEY stops the run with a usage error, never a skip."""
    monkeypatch.delenv("E2B_API_KEY", raising=False)
    pytester.makepyfile("def test_x():\n    pass\n")
    result = pytester.runpytest("--e2b-live")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*--e2b-live needs E2B_API_KEY in the environment: export your E2B key, or drop --e2b-live*"]
    )


def test_live_ini_without_key_is_a_usage_error(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The e2b_live ini key behaves like the flag: no key, usage error."""
    monkeypatch.delenv("E2B_API_KEY", raising=False)
    pytester.makeini(INI + "e2b_live = true\n")
    pytester.makepyfile("def test_x():\n    pass\n")
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (
            "not a spec",
            "*e2b_reward_subject='not a spec' is not 'module:factory'. Example: mypkg.rewards:make_reward*",
        ),
        (
            "nosuchmod_xyz:make",
            "*e2b_reward_subject='nosuchmod_xyz:make': module 'nosuchmod_xyz' cannot be found*",
        ),
    ],
)
def test_bad_subject_names_value_and_form(pytester: pytest.Pytester, value: str, message: str) -> None:
    """A malformed or unimportable subject is a usage error naming the value and the expected form."""
    pytester.makeini(INI + f"e2b_reward_subject = {value}\n")
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])


def test_bad_episode_tool_name(pytester: pytest.Pytester) -> None:
    """e2b_episode_tools rejects names that cannot be methods, naming the entry."""
    pytester.makeini(INI + "e2b_episode_tools =\n    read_file\n    not-a-name\n")
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*e2b_episode_tools entry 'not-a-name' is not a tool name*"])


def test_missing_cases_path(pytester: pytest.Pytester) -> None:
    """--e2b-cases naming nothing is a usage error."""
    result = pytester.runpytest("--e2b-cases", "nowhere.toml")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*e2b cases path*nowhere.toml* does not exist*"])


def test_live_only_tests_skip_offline(pytester: pytest.Pytester) -> None:
    """Tests marked e2b_live are skipped with the reason 'needs --e2b-live' when offline."""
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.e2b_live
        def test_live():
            raise AssertionError("must not run offline")

        def test_offline():
            pass
        """
    )
    result = pytester.runpytest("-rs", "--strict-markers")
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines(["*SKIPPED*needs --e2b-live*"])


def test_header_shows_mode_and_run_id(pytester: pytest.Pytester) -> None:
    """In a project that uses the plugin, the header names the mode, the run id and the isolation level."""
    pytester.makeini("[pytest]\ne2b_evidence = ev\nasyncio_default_fixture_loop_scope = function\n")
    pytester.makepyfile("def test_x():\n    pass\n")
    result = pytester.runpytest()
    result.stdout.fnmatch_lines(["e2b: mode=offline run_id=run-* isolation=*"])


def test_run_id_option_wins_and_the_environment_does_not(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--e2b-run-id sets the run id; a PYTEST_E2B_ENV_RUN left in the shell is not read."""
    monkeypatch.setenv("PYTEST_E2B_ENV_RUN", "from-the-shell")
    pytester.makepyfile("def test_x():\n    pass\n")
    result = pytester.runpytest("--e2b-run-id", "ci-1234")
    result.stdout.fnmatch_lines(["e2b: mode=offline run_id=ci-1234 isolation=*"])
    assert "from-the-shell" not in result.stdout.str()


def test_bad_run_id_is_a_usage_error(pytester: pytest.Pytester) -> None:
    """A run id that cannot be sandbox metadata is rejected with the value and an example."""
    result = pytester.runpytest("--e2b-run-id", "a b")
    result.stderr.fnmatch_lines(["*--e2b-run-id='a b' is not a metadata-safe run id*--e2b-run-id ci-1234*"])


@pytest.mark.full
def test_header_shows_emulator_isolation_for_catalog_runs(project: pytest.Pytester) -> None:
    """With catalog cases to run, the header shows the started emulator's isolation level."""
    result = project.runpytest("-k", "no-fence")
    result.stdout.fnmatch_lines(
        ["e2b: mode=offline run_id=run-* isolation=[np]*", "e2b subjects: reward=tinyreward:make_reward"]
    )


def test_no_catalog_without_subject(pytester: pytest.Pytester) -> None:
    """Without a subject ini key nothing from the catalog is collected."""
    pytester.makepyfile("def test_x():\n    pass\n")
    result = pytester.runpytest("--collect-only", "-q")
    result.stdout.fnmatch_lines(["test_no_catalog_without_subject.py::test_x", "1 test collected*"])


def test_loading_the_plugin_imports_nothing_heavy(pytester: pytest.Pytester) -> None:
    """A plain pytest run with the plugin loaded never imports e2b, openenv, torch or trl."""
    pytester.makeconftest(
        """
        import sys

        def pytest_sessionfinish(session):
            heavy = sorted(m for m in ("e2b", "openenv", "torch", "trl", "transformers") if m in sys.modules)
            assert not heavy, heavy
            print("HEAVY-CHECK-OK")
        """
    )
    pytester.makepyfile("def test_x():\n    pass\n")
    result = pytester.runpytest_subprocess("-s")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*HEAVY-CHECK-OK*"])


DORMANT_CONFTEST = """
import sys

def pytest_sessionfinish(session):
    loaded = sorted(m for m in ("pydantic", "pytest_e2b_env.catalog", "pytest_e2b_env.adapter.items")
                    if m in sys.modules)
    print("LOADED", loaded)
"""


@pytest.mark.full
def test_an_unasked_plugin_is_dormant(pytester: pytest.Pytester) -> None:
    """No e2b option or ini key: no header, nothing of the catalog loaded; live-only tests still skip."""
    pytester.makeconftest(DORMANT_CONFTEST)
    pytester.makepyfile(
        "import pytest\n\ndef test_x():\n    pass\n\n@pytest.mark.e2b_live\ndef test_live():\n    pass\n"
    )
    result = pytester.runpytest_subprocess("-s", "-p", "no:asyncio", "-rs")
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines(["*LOADED []*", "*needs --e2b-live*"])
    assert not [line for line in result.stdout.lines if line.startswith("e2b")], result.stdout.str()


@pytest.mark.full
@pytest.mark.parametrize("asked", [["-o", "e2b_relax="], ["--e2b-lanes", "2"], "ini"])
def test_an_e2b_key_or_option_wakes_the_plugin(pytester: pytest.Pytester, asked: Any) -> None:
    """Any e2b option, -o e2b_* or e2b_* key in the config file: the header says the mode and run id."""
    if asked == "ini":
        pytester.makeini("[pytest]\ne2b_evidence = ev\nasyncio_default_fixture_loop_scope = function\n")
        asked = []
    pytester.makepyfile("def test_x():\n    pass\n")
    result = pytester.runpytest_subprocess("-p", "no:asyncio", *asked)
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["e2b: mode=offline run_id=*"])
