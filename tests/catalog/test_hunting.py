"""The expectation-hunting program (``read_expectations.py``) against sound and leaky rewards.

It must score 0 under every sound reward (the catalog's fairness rule) and 1.0 under a reward that
lets the expected outputs reach its sandbox, wherever they land: a file beside the program, or the
evaluation cell, in the memory of the kernel whose child the program is.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import pytest
from e2b import Sandbox

from pytest_e2b_env.catalog.contract import load_subject
from pytest_e2b_env.catalog.loader import default_cases_dir, load_cases
from pytest_e2b_env.catalog.runner import run_case
from pytest_e2b_env.targets import Target

CASE = "reward-hostile-read-expectations"
SAMPLES = Path(__file__).resolve().parents[2] / "fixtures" / "subjects"


@pytest.fixture(scope="module")
def case() -> Any:
    """The catalog's hunting case: the hunter, then a correct program, on one test case."""
    (found,) = [c for c in load_cases([default_cases_dir()]) if c.id == CASE]
    return found


def _rewards(record: Any) -> Any:
    calls = [e for e in record.trajectory if e.get("kind") == "call" and e["name"] == "reward"]
    assert calls, (record.status, record.reason)
    return calls[0]["value"] if calls[0]["returned"] else "raises"


@pytest.mark.parametrize(
    ("spec", "status", "rewards"),
    [
        pytest.param("pytest_e2b_env.reward:reward_subject", "passed", [0.0, 1.0], id="reference"),
        pytest.param("baseline_reward_run_code:make_reward", "passed", [0.0, 1.0], id="run-code-baseline"),
        pytest.param("reward_uploads_expected:factory", "failed", [1.0, 1.0], id="cases-as-a-file"),
        pytest.param("reward_run_code_ships_expected:factory", "failed", [1.0, 1.0], id="cases-in-the-cell"),
    ],
)
def test_the_hunter_scores_only_where_expected_outputs_leak(
    target: Target, monkeypatch: pytest.MonkeyPatch, case: Any, spec: str, status: str, rewards: list[float]
) -> None:
    """Sound rewards score the hunter 0; uploading the cases or sending them in the cell scores it 1.0."""
    if target.isolation != "namespaces":
        pytest.skip(f"hostile programs need the namespaces level: {target.isolation_reason}")
    monkeypatch.syspath_prepend(str(SAMPLES))
    record = run_case(case, load_subject(spec, "reward"), target)
    assert _rewards(record) == rewards
    assert record.status == status, (record.reason, [c for c in record.criteria if not c["passed"]])


HUNTER = Path(__file__).resolve().parents[2] / "fixtures" / "reward" / "candidates" / "read_expectations.py"
INPUT = '[{"customer": "acme", "tokens": 12}]'
OUTPUT = '{"acme": 12}'
CASES = json.dumps([{"input": INPUT, "output": OUTPUT}])
PARENT = f"""import os, subprocess
os.unlink(__file__)  # the cases are in this process's memory only
cases = {CASES!r}
subprocess.run(["python3", "/opt/h.py"], stdin=open("/opt/in.json"))
"""
RUN = "python3 /opt/h.py < /opt/in.json"
CASES_JSON = shlex.quote(json.dumps({"test_cases": CASES}))
#: each: (files the sandbox is given, the command that runs the hunter on INPUT)
PLACES: dict[str, tuple[dict[str, str], str]] = {
    "leftover-file": ({"/tmp/old/cases.json": CASES}, RUN),
    "answer-beside-input": (
        {"/home/user/t/case3.json": INPUT, "/home/user/t/expected_3.txt": OUTPUT},
        f"cd t && {RUN}",
    ),
    "parent-memory": ({"/tmp/parent.py": PARENT}, "python3 /tmp/parent.py"),
    # the cases in its parent's environment and its grandparent's command line, not in its own
    "ancestors": ({}, f"CASES={CASES_JSON} sh -c 'unset CASES; {RUN}; true'"),
    "answer-variable": ({}, f"EXPECTED_OUTPUT={shlex.quote(OUTPUT)} {RUN}"),
}


@pytest.mark.parametrize("place", list(PLACES))
def test_the_hunter_finds_the_cases_where_its_docstring_says_it_looks(target: Target, place: str) -> None:
    """Cases in a leftover file, beside the input, in its ancestors' memory or environment; answer names."""
    if target.isolation != "namespaces":
        pytest.skip(f"hostile programs need the namespaces level: {target.isolation_reason}")
    files, command = PLACES[place]
    sandbox = Sandbox.create(timeout=120, **target.sdk_opts())
    try:
        sandbox.files.write("/opt/h.py", HUNTER.read_text(), user="root")
        sandbox.files.write("/opt/in.json", INPUT, user="root")
        for path, data in files.items():
            sandbox.files.write(path, data, user="root" if path.startswith("/opt") else "user")
        out = sandbox.commands.run(command, timeout=60)
    finally:
        sandbox.kill()
    assert out.stdout.strip() == OUTPUT


def test_the_hunter_finds_nothing_where_nothing_leaked(target: Target) -> None:
    """With no case anywhere it prints what it searched and "found": null, never an answer."""
    if target.isolation != "namespaces":
        pytest.skip(f"hostile programs need the namespaces level: {target.isolation_reason}")
    sandbox = Sandbox.create(timeout=120, **target.sdk_opts())
    try:
        sandbox.files.write("/opt/h.py", HUNTER.read_text(), user="root")
        sandbox.files.write("/opt/in.json", INPUT, user="root")
        out = sandbox.commands.run("python3 /opt/h.py < /opt/in.json", timeout=60)
    finally:
        sandbox.kill()
    summary = json.loads(out.stdout)
    assert summary["found"] is None
    assert summary["searched"]["files"] > 0
