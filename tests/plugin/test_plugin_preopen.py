"""Lane targets opened at session start: handed out, kept alive by their threads, surplus closed."""

from __future__ import annotations

import json
import os
import threading
from typing import Any

import pytest
from plugin_helpers import CASES, only_bundle, write_project

from pytest_e2b_env.adapter.lanes import PreOpened
from pytest_e2b_env.errors import EmulatorError
from pytest_e2b_env.settings import TargetSettings, new_run_id
from pytest_e2b_env.targets import open_target


def _openers() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("pytest-e2b-env-open-")]


@pytest.mark.full
def test_a_preopened_emulator_outlives_the_thread_gap_and_the_surplus_is_closed() -> None:
    """A taken emulator still answers after its opener's work is done; the untaken one is stopped."""
    run_id = new_run_id()
    opened: list[Any] = []

    def open_one() -> Any:
        target = open_target(TargetSettings(run_id=run_id))
        opened.append(target)
        return target

    pre = PreOpened(open_one, 2)
    try:
        taken = pre.take()
        # an emulator stops with the thread that started it (PR_SET_PDEATHSIG): both still live
        assert len(_openers()) == 2
        assert taken.ledger_mark() >= 0
        pre.keep(0)  # the other one is not wanted
        pre.close()
        assert _openers() == []
        (other,) = [t for t in opened if t is not taken]
        with pytest.raises(EmulatorError):  # stopped
            other.ledger_mark()
        assert taken.ledger_mark() >= 0  # the lane's own target is the lane's to close
    finally:
        for target in opened:
            target.close()


def test_an_opening_error_goes_to_the_lane_that_takes_it() -> None:
    """A target that did not open is an error for one lane, not a hang; no opened one is left."""

    class Refused(Exception):
        pass

    def refuse() -> Any:
        raise Refused("port in use")

    pre = PreOpened(refuse, 1)
    with pytest.raises(Refused, match="port in use"):
        pre.take()
    with pytest.raises(Refused):  # none left: a further lane opens its own
        pre.take()
    pre.close()
    assert _openers() == []


TRACE = """
import json
import pytest
from pytest_e2b_env.adapter.keys import runtime_key

@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session):
    runtime = session.config.stash[runtime_key]
    with open("preopened.txt", "w") as f:
        f.write(str(runtime._preopened is not None))

@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session):
    runtime = session.config.stash[runtime_key]
    with open("own.json", "w") as f:
        json.dump({"opening": runtime._own is not None, "opened": runtime._target is not None,
                   "lanes": runtime.lanes.width if runtime.lanes is not None else 0}, f)

def pytest_unconfigure(config):
    # every target is closed by now, none still opening: each one's key was kept for redaction
    with open("emulators.txt", "w") as f:
        f.write(str(len(config.stash[runtime_key].keys)))
"""


@pytest.mark.full
@pytest.mark.parametrize(("args", "preopened"), [((), "True"), (("-k", "correct"), "False")])
def test_lane_targets_open_at_session_start_unless_the_selection_is_narrowed(
    pytester: pytest.Pytester, args: tuple[str, ...], preopened: str
) -> None:
    """The whole catalog: lanes' targets open while pytest collects, and the session opens no
    target of its own (its header still names the isolation); -k waits for the selection, and
    the session's own target, opening meanwhile, is the first lane's."""
    write_project(pytester)
    (pytester.path / "mycases" / "reward.toml").write_text(
        CASES + CASES.replace('id = "reward-tiny-', 'id = "reward-tiny2-')
    )
    pytester.makeconftest(TRACE)
    result = pytester.runpytest("--e2b-lanes", "3", "--e2b-evidence", "ev", *args)
    result.assert_outcomes(passed=4 if not args else 2)
    assert (pytester.path / "preopened.txt").read_text() == preopened
    own = json.loads((pytester.path / "own.json").read_text())
    emulators = int((pytester.path / "emulators.txt").read_text())
    if not args:  # three opened, all the lanes'
        assert own == {"opening": False, "opened": False, "lanes": 3}
        assert emulators == 3
    else:  # the session's own, opening since its start, went to the first lane
        assert own == {"opening": True, "opened": False, "lanes": 2}
        assert emulators == 2
    result.stdout.fnmatch_lines(["e2b: mode=offline run_id=* isolation=*", "e2b: * level: *"])
    manifest = json.loads((only_bundle(pytester.path / "ev") / "run-manifest.json").read_text())
    assert manifest["isolation"] == result.stdout.str().split("isolation=", 1)[1].split()[0]


@pytest.mark.full
def test_with_no_lane_to_start_one_pre_opened_target_is_the_sessions(pytester: pytest.Pytester) -> None:
    """Lanes asked for but one runnable case (no lane starts): the session takes one of the
    pre-opened targets as its own, at collection's end, and closes the others."""
    write_project(pytester)
    (pytester.path / "mycases" / "reward.toml").write_text(
        CASES.split("[[case]]")[0] + "[[case]]" + CASES.split("[[case]]")[1]
    )
    pytester.makeconftest(TRACE)
    result = pytester.runpytest("--e2b-lanes", "3", "--e2b-evidence", "ev")
    result.assert_outcomes(passed=1)
    assert (pytester.path / "preopened.txt").read_text() == "True"
    own = json.loads((pytester.path / "own.json").read_text())
    assert own == {"opening": False, "opened": True, "lanes": 0}
    assert (pytester.path / "emulators.txt").read_text() == "3"
    assert _openers() == []


REFUSE_EMULATOR = """
import sys
if "emulator" in sys.orig_argv and "pytest_e2b_env.cli" in sys.orig_argv:
    sys.stderr.write("this emulator refuses to start\\n")
    raise SystemExit(7)
"""


@pytest.mark.full
def test_targets_that_cannot_start_stop_the_run_at_its_first_case(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No emulator starts (the session's own, opening in the background, nor the lanes'): the
    first case is an error naming why, nothing else runs, the bundle lists it, no traceback."""
    write_project(pytester)
    (pytester.path / "mycases" / "reward.toml").write_text(
        CASES + CASES.replace('id = "reward-tiny-', 'id = "reward-tiny2-')
    )
    site = pytester.mkdir("site")
    (site / "sitecustomize.py").write_text(REFUSE_EMULATOR)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]))
    result = pytester.runpytest_subprocess(
        "--e2b-lanes", "3", "--e2b-evidence", "ev", "-p", "no:cacheprovider"
    )
    result.assert_outcomes(errors=1)  # the run's error at the first case's setup, not the case's failure
    result.stdout.fnmatch_lines(["*the offline target did not start*exited with 1*"])
    assert "Traceback" not in result.stdout.str() + result.stderr.str()


@pytest.mark.full
def test_a_host_that_fails_to_stop_is_a_problem_and_the_target_still_closes(tmp_path: Any) -> None:
    """Runtime.close releases this process's side in a thread: a failing host is named in the
    run's problems (not lost with the thread), and the sweep and the target's stop still happen."""
    from pytest_e2b_env.adapter.runtime import Runtime
    from pytest_e2b_env.adapter.settings import Settings

    class Stuck:
        def close(self) -> None:
            raise OSError("host pipe gone")

    run_id = new_run_id()
    runtime = Runtime(Settings(False, tmp_path, [], None, None, [], run_id))
    target = open_target(TargetSettings(run_id=run_id))
    try:
        runtime._target = target
        runtime._hosts = {"reward": Stuck()}  # type: ignore[dict-item]
        runtime.close()
        assert runtime.problems == ["stopping a case host failed: OSError: host pipe gone"]
        with pytest.raises(EmulatorError):  # swept and stopped all the same
            target.ledger_mark()
    finally:
        target.close()
