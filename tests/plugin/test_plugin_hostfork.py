"""Lanes fork their case hosts from one template that imported the subject once (catalog/hostfork.py)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from plugin_helpers import CASES, REWARD_MODULE, write_project

from pytest_e2b_env.catalog.contract import load_subject
from pytest_e2b_env.errors import ConfigError

#: The tiny reward, saying which process imported it and which process (and parent) scored.
WATCHED = (
    REWARD_MODULE
    + """
import os as _os, threading as _threading
_LOG = _os.path.join(_os.path.dirname(__file__), "processes.log")
with open(_LOG, "a") as _f:
    _f.write(f"import {_os.getpid()}\\n")
{start}

def watched_reward():
    with open(_LOG, "a") as f:
        f.write(f"score {_os.getpid()} {_os.getppid()}\\n")
    return Scorer()
"""
)


def _more_cases(pytester: pytest.Pytester, copies: int) -> None:
    text = "".join(CASES.replace('id = "reward-tiny-', f'id = "reward-tiny{n}-') for n in range(copies))
    (pytester.path / "mycases" / "reward.toml").write_text(text)


def _processes(log: Path) -> tuple[set[int], set[tuple[int, int]]]:
    """(pids that imported the subject, (pid, parent pid) of each process that scored)."""
    imported, scored = set(), set()
    for line in log.read_text().splitlines():
        word, *pids = line.split()
        if word == "import":
            imported.add(int(pids[0]))
        else:
            scored.add((int(pids[0]), int(pids[1])))
    return imported, scored


@pytest.mark.full
def test_lane_hosts_are_forked_from_one_template_that_imported_the_subject(pytester: pytest.Pytester) -> None:
    """Two lanes: the subject is imported by one template only, never by the controller or a host."""
    write_project(pytester, subject="watched:watched_reward")
    pytester.makepyfile(watched=WATCHED.replace("{start}", ""))
    _more_cases(pytester, copies=3)
    result = pytester.runpytest("--e2b-lanes", "2", "--e2b-evidence", "ev")
    result.assert_outcomes(passed=6)
    imported, scored = _processes(pytester.path / "processes.log")
    assert os.getpid() not in imported  # the controller (pytester runs pytest in this process)
    templates = imported
    assert len(templates) == 1, imported
    assert scored, "no case scored"
    assert {parent for _, parent in scored} == templates, (scored, templates)
    assert not {pid for pid, _ in scored} & imported  # a forked host imports nothing again


@pytest.mark.full
def test_a_subject_whose_import_leaves_a_thread_gets_spawned_hosts(pytester: pytest.Pytester) -> None:
    """Forking a process with another thread running is unsafe: each host imports for itself."""
    write_project(pytester, subject="watched:watched_reward")
    start = "_threading.Thread(target=__import__('time').sleep, args=(3600,), daemon=True).start()"
    pytester.makepyfile(watched=WATCHED.replace("{start}", start))
    _more_cases(pytester, copies=3)
    result = pytester.runpytest("--e2b-lanes", "2", "--e2b-evidence", "ev")
    result.assert_outcomes(passed=6)
    imported, scored = _processes(pytester.path / "processes.log")
    assert scored, "no case scored"
    assert {parent for _, parent in scored} == {os.getpid()}, scored  # spawned by the controller
    assert {pid for pid, _ in scored} <= imported  # and each imported the subject itself


def test_a_preload_that_is_not_callable_is_a_config_error_naming_it(pytester: pytest.Pytester) -> None:
    """``preload`` takes a zero-argument callable, like ``warm_up``."""
    pytester.makepyfile(badpreload="def make():\n    pass\nmake.e2b_contract = {'preload': 'openenv'}\n")
    pytester.syspathinsert()
    with pytest.raises(ConfigError, match=r"preload='openenv' is not valid; give a zero-argument callable"):
        load_subject("badpreload:make", "reward")


@pytest.mark.full
def test_the_reference_episode_declares_a_preload_that_starts_no_thread() -> None:
    """What the template runs before forking: imports only, in a fresh interpreter.

    openenv's optional web UI is left out (no gradio, pandas or pyarrow, so no native thread
    either), and gradio still imports afterwards for whoever asks for it.
    """
    import subprocess
    import sys

    code = (
        "import os, sys, threading\n"
        "from pytest_e2b_env.catalog.contract import load_subject\n"
        "s = load_subject('pytest_e2b_env.episode:ReportEpisode', 'episode')\n"
        "s.contract.preload()\n"
        "import openenv.core.env_server as served\n"
        "native = len(os.listdir('/proc/self/task'))\n"
        "skipped = [m for m in ('gradio', 'pandas', 'pyarrow') if m not in sys.modules]\n"
        "print(threading.active_count(), native, *skipped, served.create_web_interface_app)\n"
        "import gradio\n"
        "print(gradio.__name__, s.contract.summary()['preload'])\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True
    )
    expected = ["1", "1", "gradio", "pandas", "pyarrow", "None"]
    expected += ["gradio", "pytest_e2b_env.episode.client.preload"]
    assert out.stdout.split() == expected, out.stdout + out.stderr


def test_the_reference_reward_preloads_its_runner_assembled_and_starts_no_thread() -> None:
    """Its hosts find the runner and the probe assembled (the template's work, once); no thread at all."""
    import subprocess
    import sys

    code = (
        "import os, threading\n"
        "from pytest_e2b_env.catalog.contract import load_subject\n"
        "from pytest_e2b_env.standalone import assemble\n"
        "s = load_subject('pytest_e2b_env.reward:reward_subject', 'reward')\n"
        "s.contract.preload()\n"
        "native = len(os.listdir('/proc/self/task'))\n"
        "cached = assemble.script.cache_info().currsize\n"
        "print(threading.active_count(), native, cached, s.contract.summary()['preload'])\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True
    )
    expected = ["1", "1", "2", "pytest_e2b_env.reward.subject.preload"]
    assert out.stdout.split() == expected, out.stdout + out.stderr


def test_a_host_skips_gradios_stub_rewriting_and_nothing_else() -> None:
    """openenv's import in a case host no longer rewrites gradio's .pyi stubs (seconds of CPU per
    template): the one function is a no-op in both modules that hold it, the components are made."""
    import subprocess
    import sys

    pytest.importorskip("gradio")
    code = (
        "from pytest_e2b_env.catalog import quiet_imports\n"
        "quiet_imports.install()\n"
        "quiet_imports.install()\n"
        "import sys\n"
        "import openenv.core.env_server.http_server\n"
        "import gradio, gradio.blocks_events as be, gradio.component_meta as cm\n"
        "finders = sum(type(f).__name__ == '_SkipStubs' for f in sys.meta_path)\n"
        "print(finders, cm.create_or_modify_pyi.__name__, be.create_or_modify_pyi.__name__, "
        "gradio.Textbox.__name__)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True
    )
    assert out.stdout.split() == ["1", "_no_stub", "_no_stub", "Textbox"], out.stdout + out.stderr


@pytest.mark.full
def test_a_template_whose_controller_left_mid_import_ends_quietly(tmp_path: Path) -> None:
    """The run ended while the template still imported the subject (an emulator that did not
    start, -x, Ctrl-C): its answer finds the socket closed and it exits 0, no traceback."""
    (tmp_path / "slowsubject.py").write_text("import time\ntime.sleep(1.0)\ndef make():\n    return None\n")
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), *sys.path]))
    proc = subprocess.Popen(
        [sys.executable, "-m", "pytest_e2b_env.catalog.hostfork", str(theirs.fileno())],
        pass_fds=(theirs.fileno(),),
        env=env,
        stdin=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    theirs.close()
    spec = {"spec": "slowsubject:make", "kind": "reward", "contract": None}
    ours.sendall(json.dumps({"op": "preload", "subject": spec}).encode())
    ours.close()  # gone before the import is done
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stderr.decode()
    assert b"Traceback" not in stderr, stderr.decode()
