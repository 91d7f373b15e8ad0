"""The verdict is out of the subject's reach: judged in the controller, from the target's own books.

A subject runs in a case host that carries out one request per subject call and answers what the
call returned or raised. Whatever the subject patches in that process (the judge, the runner, the
drivers, the evidence writer) can only change its own answers; what it starts ends with its host.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from plugin_helpers import CASE_IDS, only_bundle, read_json, write_project

from pytest_e2b_env.catalog import procs

#: A subject that rewrites the harness wherever it is imported, to mark every criterion passed.
FORGER = '''
import inspect

from e2b import AsyncSandbox

import pytest_e2b_env.catalog.drive_reward as _drive
import pytest_e2b_env.catalog.runner as _runner
import pytest_e2b_env.catalog.verdict as _verdict
import pytest_e2b_env.evidence.writer as _writer


def _forge():
    if getattr(_verdict, "forged", False):
        return
    _verdict.forged = True
    for name in list(_verdict.JUDGES):
        _verdict.JUDGES[name] = lambda expected, obs: (True, "forged")
    real_judge = _verdict.judge

    def judge(*args, **kwargs):
        return [dict(c, passed=True) for c in real_judge(*args, **kwargs)]

    _verdict.judge = _runner.judge = judge
    real_run = _runner.run_case

    def run_case(case, *args, **kwargs):
        record = real_run(case, *args, **kwargs)
        record.status, record.reason = "passed", None
        for c in record.criteria:
            c["passed"] = True
        return record

    _runner.run_case = run_case
    real_drive = _drive.RewardDriver.run

    def clean(obs):
        for call in obs.calls:
            call.error, call.returned = None, True
        return obs

    if inspect.iscoroutinefunction(real_drive):
        async def drive(self):
            return clean(await real_drive(self))
    else:
        def drive(self):
            return clean(real_drive(self))
    _drive.RewardDriver.run = drive
    real_add = _writer.BundleWriter.add_case

    def add_case(self, record, *args, **kwargs):
        return real_add(self, dict(record, status="passed", reason=None), *args, **kwargs)

    _writer.BundleWriter.add_case = add_case


_forge()  # in the module body: wherever the subject is imported


def zero_reward():
    """Scores 0 whatever happens, a refused key included: reward-auth-401 must fail it."""
    _forge()  # and again when built, in the process that runs it

    async def reward(completions, test_cases, **kwargs):
        try:
            box = await AsyncSandbox.create(timeout=60)
            await box.kill()
        except Exception:
            pass
        return [0.0 for _ in completions]

    return reward


def reference():
    """The bundled reward, correct, with the same patches: it passes on its own merits."""
    _forge()
    from pytest_e2b_env.reward import reward_subject

    return reward_subject()


from pytest_e2b_env.reward import reward_subject as _reference

reference.e2b_contract = _reference.e2b_contract
'''


def _validate(tmp: Path, subject: str, select: str) -> tuple[int, Path, str]:
    """``pytest-e2b-env validate`` in a directory of its own; (exit code, bundle, output)."""
    (tmp / "forger.py").write_text(FORGER)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp), *sys.path]))
    cmd = [sys.executable, "-m", "pytest_e2b_env.cli", "validate", "--subject", "reward"]
    cmd += ["--reward-subject", subject, "-k", select, "--output", str(tmp / "ev"), "-q"]
    run = subprocess.run(cmd, cwd=tmp, env=env, capture_output=True, text=True, timeout=600)
    return run.returncode, only_bundle(tmp / "ev"), run.stdout + run.stderr


def test_a_subject_that_patches_the_harness_in_its_process_cannot_change_a_verdict(tmp_path: Path) -> None:
    """Patching the judge, the runner, the drivers and the writer leaves reward-auth-401 failed.

    The subject scores 0 on a refused key (401) instead of raising; its module body and factory
    mark every criterion passed in whatever process imports them.
    """
    code, bundle, out = _validate(tmp_path, "forger:zero_reward", "reward-auth-401")
    assert code == 1, out
    coverage = read_json(bundle / "coverage.json")
    statuses = {c["id"]: c["status"] for c in coverage["cases"]}
    assert statuses == {"reward-auth-401": "failed"}, statuses
    assert not coverage["passed"]
    report = read_json(bundle / "cases" / "reward-auth-401" / "report.json")
    failed = {c["id"] for c in report["criteria"] if not c["passed"]}
    assert "raises" in failed, report["criteria"]
    verify = subprocess.run(
        [sys.executable, "-m", "pytest_e2b_env.cli", "verify-evidence", str(bundle)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert verify.returncode == 0, verify.stdout + verify.stderr  # an intact bundle of a failed case


def test_a_correct_subject_with_the_same_patches_still_passes(tmp_path: Path) -> None:
    """The patches change nothing the other way either: the correct reference still passes."""
    code, bundle, out = _validate(tmp_path, "forger:reference", "reward-auth-401 or reward-good-correct")
    assert code == 0, out
    statuses = {c["id"]: c["status"] for c in read_json(bundle / "coverage.json")["cases"]}
    assert statuses == {"reward-auth-401": "passed", "reward-good-correct": "passed"}, statuses


# ---------------------------------------------------------------------- what the subject starts
DAEMONS = """
import os, subprocess, sys, threading, time
from pathlib import Path

from e2b import AsyncSandbox

HERE = Path(__file__).parent
SLEEPER = [sys.executable, "-c", "import time; time.sleep(600)"]
{start}


def _daemons():
    # a daemon in a session of its own, out of the host's process group
    proc = subprocess.Popen(SLEEPER, start_new_session=True)
    (HERE / f"pid-session-{proc.pid}").touch()
    # a classic double fork: its parent exits at once, so the daemon is an orphan
    code = (
        "import subprocess, sys; "
        "p = subprocess.Popen(sys.argv[2:], start_new_session=True); "
        "open(sys.argv[1] + str(p.pid), 'w').close()"
    )
    subprocess.run([sys.executable, "-c", code, str(HERE / "pid-orphan-"), *SLEEPER], check=True)


def make_reward():
    _daemons()

    async def reward(completions, test_cases, **kwargs):
        if {crash} and "print(4)" in str(completions):
            os._exit(3)
        return [1.0 if "sum(" in str(c) else 0.0 for c in completions]

    return reward
"""


def _started(path: Path) -> list[int]:
    return [int(p.name.rsplit("-", 1)[1]) for p in path.glob("pid-*")]


@pytest.mark.parametrize("crash", [False, True])
@pytest.mark.parametrize("hosts", ["forked", "spawned"])
def test_daemons_the_subject_starts_do_not_outlive_the_run(
    pytester: pytest.Pytester, crash: bool, hosts: str
) -> None:
    """A factory's start_new_session and double-forked daemons are gone after the run, by pid.

    Also when the host died under them (os._exit), and whether the host was forked from the
    template or spawned (an import that leaves a thread running).
    """
    thread = "threading.Thread(target=time.sleep, args=(3600,), daemon=True).start()"
    start = thread if hosts == "spawned" else ""
    write_project(pytester, subject="daemons:make_reward")
    pytester.makepyfile(daemons=DAEMONS.replace("{start}", start).replace("{crash}", str(crash)))
    try:
        result = pytester.runpytest("--e2b-evidence", "ev", "--e2b-lanes", "2")
        if crash:
            result.assert_outcomes(passed=1, failed=1)
        else:
            result.assert_outcomes(passed=2)
        pids = _started(pytester.path)
        assert len(pids) >= 2, pids
        assert not [pid for pid in pids if procs.alive(pid)], pids
    finally:
        for pid in _started(pytester.path):  # never leave a sleeper on a shared machine
            if procs.alive(pid):
                os.kill(pid, signal.SIGKILL)
    if crash:
        coverage = read_json(only_bundle(pytester.path / "ev") / "coverage.json")
        assert [c["id"] for c in coverage["cases"]] == CASE_IDS


# ---------------------------------------------------------------------- what the host holds
SPY = """
import json, os, urllib.error, urllib.request
from pathlib import Path

HERE = Path(__file__).parent


def _read(path):
    try:
        return Path(path).read_bytes().decode(errors="replace")
    except OSError as exc:
        return f"unreadable: {exc}"


def make_reward():
    def reward(completions, test_cases, **kwargs):
        url = os.environ["E2B_API_URL"] + "/_emulator/ledger"
        request = urllib.request.Request(url, headers={"X-Emulator-Key": os.environ["E2B_API_KEY"]})
        try:
            status = urllib.request.urlopen(request, timeout=10).status
        except urllib.error.HTTPError as exc:
            status = exc.code
        seen = {
            "environ": dict(os.environ),
            "proc_environ": _read("/proc/self/environ"),
            "cmdline": _read("/proc/self/cmdline"),
            "parent_environ": _read(f"/proc/{os.getppid()}/environ"),
            "parent_cmdline": _read(f"/proc/{os.getppid()}/cmdline"),
            "control_api_with_the_sdk_key": status,
        }
        (HERE / "seen.json").write_text(json.dumps(seen))
        return [0.0 for _ in completions]
    return reward
"""


def test_the_case_host_never_holds_the_control_key(pytester: pytest.Pytester) -> None:
    """Its environment, arguments, parent and every request it gets lack the target's control key."""
    from pytest_e2b_env.catalog.host import CaseHost
    from pytest_e2b_env.emulator import Emulator

    keys: list[str] = []
    sent: list[str] = []
    real_start, real_send = Emulator.start, CaseHost._send

    def start(self: Emulator) -> Emulator:
        started = real_start(self)
        keys.append(self.control_key)
        return started

    def send(self: CaseHost, message: dict[str, object]) -> None:
        sent.append(json.dumps(message))
        real_send(self, message)

    write_project(pytester, subject="spy:make_reward")
    pytester.makepyfile(spy=SPY)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Emulator, "start", start)
        patch.setattr(CaseHost, "_send", send)
        result = pytester.runpytest("--e2b-evidence", "ev", "--e2b-lanes", "1", "-k", "no-fence")
    result.assert_outcomes(passed=1)
    seen = json.loads((pytester.path / "seen.json").read_text())
    assert keys
    assert sent
    assert seen["control_api_with_the_sdk_key"] == 401
    text = json.dumps(seen) + "".join(sent)
    assert not [key for key in keys if key in text]
    assert "E2B_API_KEY" in seen["environ"]  # what it needs to reach the target, and only that
    assert not {"PYTEST_E2B_ENV_EMULATOR_KEY", "PYTEST_E2B_ENV_ATTACH"} & set(seen["environ"])
