"""The pool scores candidates right on the emulator: good, partial, ordering, hostile programs."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reward_helpers import CANDIDATES, TASKS, TOTAL, completion, program

from pytest_e2b_env.emulator import Emulator
from pytest_e2b_env.errors import ConfigError
from pytest_e2b_env.reward import RewardPool
from pytest_e2b_env.reward.protocol import Limits

pytestmark = pytest.mark.namespaces


async def test_correct_partial_wrong(make_pool: Callable[..., RewardPool]) -> None:
    """Correct scores 1.0, partial k/n, wrong 0, with a reason per zero in the ledger."""
    pool = make_pool()
    names = ["total_tokens_correct", "total_tokens_partial", "total_tokens_wrong"]
    scores = await pool.code_reward([completion(program(n)) for n in names], [TOTAL] * 3)
    assert scores == [1.0, 2 / 3, 0.0]
    ledger = sorted(pool.ledger, key=lambda r: r["index"])
    assert [r["reason"] for r in ledger] == [None, "mismatch", "mismatch"]
    assert [c["reason"] for c in ledger[1]["cases"]] == ["passed", "passed", "mismatch"]
    assert all(r["worker_id"] for r in ledger)


@pytest.mark.full
async def test_every_task_has_correct_partial_wrong(make_pool: Callable[..., RewardPool]) -> None:
    """Each task of both splits: its correct program 1.0, partial strictly between, wrong 0."""
    pool = make_pool(workers=2)
    completions: list[Any] = []
    cases: list[Any] = []
    for task in TASKS["train"] + TASKS["eval"]:
        stem = task["task_id"].replace("-", "_")
        for kind in ("correct", "partial", "wrong"):
            completions.append(completion(program(f"{stem}_{kind}")))
            cases.append(task["test_cases"])
    scores = await pool.code_reward(completions, cases)
    for i in range(0, len(scores), 3):
        correct, partial, wrong = scores[i : i + 3]
        assert (correct, wrong) == (1.0, 0.0), completions[i]
        assert 0.0 < partial < 1.0, completions[i + 1]


async def test_invalid_code_uses_no_sandbox(make_pool: Callable[..., RewardPool], emulator: Emulator) -> None:
    """No fence, other fences, syntax errors and pathological sources score 0 without any sandbox."""
    pool = make_pool()
    mark = emulator.ledger_mark()
    texts = [
        (CANDIDATES / f"{n}.txt").read_text() for n in ("no_fence", "fence_other_language", "fence_unclosed")
    ]
    sources = [program(n) for n in ("syntax_error", "pathological_unary_minus", "pathological_long_sum")]
    completions = [[{"role": "assistant", "content": t}] for t in texts] + [completion(s) for s in sources]
    completions.append([{"role": "assistant", "content": [{"type": "text", "text": "x"}]}])
    scores = await pool.code_reward(completions, [TOTAL] * len(completions))
    assert scores == [0.0] * len(completions)
    assert [r["reason"] for r in pool.ledger] == ["no_code"] * 3 + ["syntax"] * 3 + ["bad_content"]
    assert emulator.ledger(since=mark) == []


async def test_expected_outputs_never_enter_a_sandbox(
    make_pool: Callable[..., RewardPool], faults: Any
) -> None:
    """A value that appears only in the expected output is never in any request body."""
    secret_total = 987654321
    cases = [
        {
            "input": json.dumps(
                [{"customer": "a", "tokens": secret_total - 1}, {"customer": "a", "tokens": 1}]
            ),
            "output": json.dumps({"a": secret_total}),
        }
    ]
    faults.add(route="*", answer={"delay": 0}, times=None, contains=str(secret_total))
    pool = make_pool()
    assert await pool.code_reward([completion(program("total_tokens_correct"))], [cases]) == [1.0]
    assert [rule["fired"] for rule in faults.list()] == [0]


@pytest.mark.full
@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(delays=st.lists(st.sampled_from([0.0, 0.3, 0.6]), min_size=3, max_size=4))
def test_scores_keep_completion_order(
    emulator: Emulator, runner_supported: None, delays: list[float]
) -> None:
    """Scores come back in completion order even when later candidates finish first."""
    emulator.faults.clear()
    for i, delay in enumerate(delays):
        emulator.faults.add(
            route="POST /process.Process/Start", answer={"delay": delay}, contains=f"# cand-{i}#"
        )
    sources = [
        program("total_tokens_correct" if i % 2 == 0 else "total_tokens_wrong") for i in range(len(delays))
    ]
    completions = [completion(f"# cand-{i}#\n{s}") for i, s in enumerate(sources)]

    async def run() -> list[float]:
        pool = RewardPool(workers=len(delays), create_interval=0, api_opts=emulator.sdk_opts())
        try:
            return await pool.code_reward(completions, [TOTAL] * len(delays))
        finally:
            await pool.close()

    try:
        assert asyncio.run(run()) == [1.0 if i % 2 == 0 else 0.0 for i in range(len(delays))]
    finally:
        emulator.faults.clear()


HOSTILE = {
    "debug_print": {"bad_json"},
    "huge_output": {"output_too_large"},
    "non_json": {"bad_json"},
    "type_confusion_float": {"mismatch"},
    "type_confusion_bool": {"mismatch"},
    "type_confusion_string": {"mismatch"},
    "duplicate_keys": {"bad_json"},
    "nan_output": {"bad_json"},
    "infinite_loop": {"timeout"},
    "sleep_past_deadline": {"timeout"},
    "setsid_daemon": {"mismatch", "bad_json"},
    "fork_bomb": {"timeout", "nonzero_exit"},
    "memory_hog": {"nonzero_exit", "timeout"},  # zeroing its whole address space may outlast 1 s
    "network_connect": {"mismatch"},
    "write_outside_scratch": {"mismatch"},
    "read_expectations": {"mismatch"},
    "kill_supervisor": {"nonzero_exit", "mismatch"},
    "binary_stdout": {"bad_json"},
    "ignore_stdin": {"mismatch"},
    "exit_partial_output": {"bad_json"},
}


# A program that may run into its 1 s deadline takes seconds: those are in the full tier.
@pytest.mark.parametrize(
    "name",
    [
        pytest.param(name, marks=pytest.mark.full) if "timeout" in HOSTILE[name] else name
        for name in sorted(HOSTILE)
    ],
)
async def test_hostile_scores_zero_and_worker_survives(
    make_pool: Callable[..., RewardPool], name: str
) -> None:
    """A hostile or defective program scores 0 for its own reason; the same worker then scores right."""
    pool = make_pool(workers=1, case_seconds=1.0)
    scores = await pool.code_reward(
        [completion(program(name)), completion(program("total_tokens_correct"))], [TOTAL, TOTAL]
    )
    assert scores == [0.0, 1.0]
    hostile, correct = sorted(pool.ledger, key=lambda r: r["index"])
    assert {c["reason"] for c in hostile["cases"]} <= HOSTILE[name]
    assert hostile["worker_id"] == correct["worker_id"]
    assert pool.metrics["workers_created"] == 1
    assert pool.metrics["infrastructure_retries"] == 0


#: Correct: pinned to CPU 0, it wants 1 s of CPU, then echoes its input.
PINNED = """
import json, os, sys, time
os.sched_setaffinity(0, {0})
began = time.process_time()
while time.process_time() - began < 1.0:
    pass
print(json.dumps(json.load(sys.stdin)))
"""

#: The same, but sharing CPU 0 with a busy child of its own: its wait is its own doing.
SELF_CONTENDED = PINNED.replace("began = ", "hog = os.fork()\nwhile hog == 0:\n    pass\nbegan = ", 1)


@pytest.fixture
def cpu0_hog() -> Iterator[None]:
    """A busy process outside every sandbox on CPU 0: the host is loaded, not the case (ends by itself)."""
    hog = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import os, time\nos.sched_setaffinity(0, {0})\nend = time.monotonic() + 120\n"
            "while time.monotonic() < end:\n    pass\n",
        ]
    )
    try:
        yield
    finally:
        hog.kill()
        hog.wait(timeout=30)


@pytest.mark.full
async def test_a_correct_program_slowed_by_cpu_contention_is_no_timeout(
    make_pool: Callable[..., RewardPool], cpu0_hog: None
) -> None:
    """The deadline counts the program's own time, so a loaded host does not turn 1.0 into 0."""
    # wide wall slack: what is tested is the own-time deadline, whatever else loads this machine
    pool = make_pool(workers=1, case_seconds=1.5, limits=Limits(wall_slack=20))
    cases = [{"input": "7", "output": "7"}]
    assert await pool.code_reward([completion(PINNED)], [cases]) == [1.0]
    (record,) = pool.ledger
    (case,) = record["cases"]
    assert case["seconds"] > 1.5, case  # it did run past the deadline in wall time
    timing = case["timing"]  # the evidence of why: it waited for the CPU the hog held
    assert timing["waited"] > 0, case
    assert timing["own"] < 1.5 < timing["own"] + timing["waited"], case
    # and a program that sleeps past the deadline still times out at it, asleep, not stalled
    sleeper = "import time\ntime.sleep(5)\n"
    assert await pool.code_reward([completion(sleeper)], [cases]) == [0.0]
    (case,) = pool.ledger[-1]["cases"]
    assert case["reason"] == "timeout", case
    assert case["timing"]["state"] == "S", case
    assert case["timing"]["own"] >= 1.5 > case["timing"]["blocked"], case


@pytest.mark.full
async def test_a_program_kept_waiting_by_its_own_children_times_out(
    make_pool: Callable[..., RewardPool],
) -> None:
    """Waiting for a CPU its own processes hold is no starvation: a fork bomb ends at its deadline."""
    pool = make_pool(workers=1, case_seconds=1.5, limits=Limits(wall_slack=20))
    # Its whole tree keeps CPU 0 busy for about 2 s of wall: 2 s of its own time, over 1.5. (Were
    # only the program's own wait counted, it would have 1 s of its own and score 1.0.)
    assert await pool.code_reward([completion(SELF_CONTENDED)], [[{"input": "7", "output": "7"}]]) == [0.0]
    (case,) = pool.ledger[-1]["cases"]
    assert case["reason"] == "timeout", case


async def test_a_starved_case_is_stopped_at_its_wall_slack(
    make_pool: Callable[..., RewardPool], cpu0_hog: None
) -> None:
    """However much of its wall time a case spends waiting for a CPU, it ends at deadline x slack;
    stopped there before its own time was spent, the host starved it: retried, then no score, never 0."""
    # Sharing CPU 0 with the hog it runs about half the time: at 1.5 x 0.5 s of wall its own time
    # is near 0.4 s, under its 0.5 s deadline.
    pool = make_pool(
        workers=1, case_seconds=0.5, limits=Limits(wall_slack=1.5), on_infrastructure="mask", mask_budget=1.0
    )
    starved = PINNED.replace("< 1.0", "< 60")  # wants 60 s of CPU it never gets
    assert await pool.code_reward([completion(starved)], [[{"input": "7", "output": "7"}]]) == [None]
    record = pool.ledger[-1]
    assert (record["reason"], record["failure_kind"], record["attempts"]) == ("masked", "host_starved", 2)
    assert all("StarvedCase" in e for e in record["errors"]), record


def test_wall_slack_outside_its_range_is_refused() -> None:
    """A slack below 1 would cut a case before its deadline; the error names the value."""
    with pytest.raises(ConfigError, match=r"limits.wall_slack=0.5"):
        RewardPool(limits=Limits(wall_slack=0.5))


async def test_hostile_writes_left_no_trace(make_pool: Callable[..., RewardPool]) -> None:
    """After write attempts outside scratch, the worker's runner and filesystem are untouched."""
    pool = make_pool(workers=1)
    await pool.code_reward([completion(program("write_outside_scratch"))], [TOTAL])
    worker = next(iter(pool._owned.values()))
    listing = await worker.sandbox.commands.run(
        "ls /pwned /etc/pwned /var/tmp/pwned /home/user/pwned 2>&1; "
        "grep -c pwned /opt/pytest-e2b-env/reward/runner.py; true",
        user="root",
    )
    assert listing.stdout.count("No such file") == 4
    assert listing.stdout.strip().endswith("0")


async def test_dead_runner_server_falls_back_to_one_shot(make_pool: Callable[..., RewardPool]) -> None:
    """If the persistent runner dies, candidates still run (one-shot runner), no retry needed."""
    pool = make_pool(workers=1)
    correct = completion(program("total_tokens_correct"))
    assert await pool.code_reward([correct], [TOTAL]) == [1.0]
    worker = next(iter(pool._owned.values()))
    # SIGKILL ends a process asynchronously: the next call is to meet a dead runner (gone or a
    # zombie), not one still exiting under a loaded host (that one costs a retry, by design).
    await worker.sandbox.commands.run(
        "P=$(cat /opt/pytest-e2b-env/reward/serve/pid); kill -9 $P; for i in $(seq 400); do"
        ' read -r _ _ S _ < /proc/$P/stat 2>/dev/null && [ "$S" != Z ] || break; sleep 0.05; done',
        user="root",
    )
    assert await pool.code_reward([correct, correct], [TOTAL, TOTAL]) == [1.0, 1.0]
    assert pool.metrics["infrastructure_retries"] == 0, [record["errors"] for record in pool.ledger]


async def test_large_inputs_go_through_one_upload(make_pool: Callable[..., RewardPool]) -> None:
    """A payload too big for one command line is uploaded once, then scored the same way."""
    records = [{"customer": f"c{i % 50}", "tokens": i} for i in range(6000)]
    totals: dict[str, int] = {}
    for record in records:
        totals[record["customer"]] = totals.get(record["customer"], 0) + record["tokens"]
    cases = [{"input": json.dumps(records), "output": json.dumps(totals)}]
    assert len(cases[0]["input"]) > 130_000
    pool = make_pool(workers=1)
    assert await pool.code_reward([completion(program("total_tokens_correct"))], [cases]) == [1.0]


async def test_free_warm_worker_beats_a_paced_creation(
    make_pool: Callable[..., RewardPool], emulator: Emulator
) -> None:
    """A candidate takes the first worker that frees up instead of waiting for a paced creation."""
    pool = make_pool(workers=2, create_interval=30.0)
    correct = completion(program("total_tokens_correct"))
    assert await pool.code_reward([correct, correct], [TOTAL, TOTAL]) == [1.0, 1.0]
    first, second = pool.ledger
    assert first["worker_id"] == second["worker_id"]
    await pool.close()  # drops the creation still waiting for its pacing slot
    assert pool.metrics["workers_created"] == 1
