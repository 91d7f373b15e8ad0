"""Case isolation holds against hostile programs: no nested namespaces, keyrings, memory or input leaks."""

from __future__ import annotations

import asyncio
import base64
import json
import time
from collections.abc import Callable

import pytest
from reward_helpers import TOTAL, completion, program

from pytest_e2b_env.emulator import Emulator
from pytest_e2b_env.reward import Isolation, Limits, PreflightError, RewardPool
from pytest_e2b_env.reward.protocol import SERVE_DIR, Payload
from pytest_e2b_env.reward.workers import Worker, WorkerClient, probe_source

pytestmark = pytest.mark.namespaces

CORRECT = completion(program("total_tokens_correct"))


def reasons(pool: RewardPool, index: int) -> set[str]:
    """The per-case reasons of the ledger record of candidate ``index`` (of the latest batch)."""
    record = [r for r in pool.ledger if r["index"] == index][-1]
    return {c["reason"] for c in record["cases"]}


async def test_nested_user_namespace_cannot_mount_a_tmpfs(make_pool: Callable[..., RewardPool]) -> None:
    """No user namespace of its own, so no tmpfs past the scratch limit; the worker then scores right."""
    pool = make_pool(workers=1)
    hostile = completion(program("nested_userns_tmpfs"))
    assert await pool.code_reward([hostile, CORRECT], [TOTAL, TOTAL]) == [0.0, 1.0]
    assert reasons(pool, 0) == {"mismatch"}  # printed null: every attempt was refused
    assert pool.metrics["workers_created"] == 1


async def test_keyring_is_no_channel_between_candidates(make_pool: Callable[..., RewardPool]) -> None:
    """An answer left in a kernel keyring by one candidate cannot be read by the next one on the worker."""
    pool = make_pool(workers=1)
    assert await pool.code_reward([completion(program("keyring_writer"))], [TOTAL]) == [0.0]
    reader = completion(program("keyring_reader"))
    assert await pool.code_reward([reader, CORRECT], [TOTAL, TOTAL]) == [0.0, 1.0]
    assert reasons(pool, 0) == {"mismatch"}
    assert len({r["worker_id"] for r in pool.ledger}) == 1  # the same worker ran both


async def test_case_memory_is_bounded_in_aggregate(make_pool: Callable[..., RewardPool]) -> None:
    """Children of one case cannot hold more than the per-case aggregate between them."""
    pool = make_pool(workers=1)
    hostile = completion(program("memory_children"))
    assert await pool.code_reward([hostile, CORRECT], [TOTAL[:1], TOTAL]) == [0.0, 1.0]
    assert reasons(pool, 0) == {"mismatch"}  # printed null: the aggregate stayed under 2 GiB


async def test_uploaded_inputs_are_unreadable_by_cases(make_pool: Callable[..., RewardPool]) -> None:
    """A payload uploaded as a file (over 120 KB) is not readable by any case of the candidate."""
    pairs = [(f"c{i % 40}", i) for i in range(5000)]
    small = [("acme", 12), ("beta", 3), ("acme", 8)]
    cases = []
    for batch in (pairs, small):
        totals: dict[str, int] = {}
        for customer, tokens in batch:
            totals[customer] = totals.get(customer, 0) + tokens
        records = [{"customer": customer, "tokens": tokens} for customer, tokens in batch]
        cases.append({"input": json.dumps(records), "output": json.dumps(totals)})
    assert len(cases[0]["input"]) > 120_000  # over one command line: uploaded as a file
    assert len(cases[1]["input"]) >= 96  # long enough for the program to search for
    pool = make_pool(workers=1)
    hostile = completion(program("read_other_inputs"))
    assert await pool.code_reward([hostile, CORRECT], [cases, cases]) == [0.0, 1.0]
    assert reasons(pool, 0) == {"mismatch"}  # printed null in both cases: no copy was readable


@pytest.mark.parametrize(
    ("weaker", "failed_checks"),
    [
        (Isolation(seccomp=False), ("userns_denied", "keyring_denied", "memfd_denied", "sysv_ipc_denied")),
        (Isolation(private_inputs=False), ("inputs_private", "programs_unlisted")),
        (Isolation(case_userns=False), ("cases_separate",)),  # side by side under one uid
    ],
)
async def test_preflight_refuses_weaker_case_isolation(
    make_pool: Callable[..., RewardPool], weaker: Isolation, failed_checks: tuple[str, ...]
) -> None:
    """A worker without the syscall filter or with readable uploads fails the preflight, naming the checks."""
    pool = make_pool(workers=1, isolation=weaker)
    with pytest.raises(PreflightError) as caught:
        await pool.code_reward([CORRECT], [TOTAL])
    for name in failed_checks:
        assert name in str(caught.value)
    assert pool.ledger == []


async def test_preflight_refuses_an_unbounded_case_memory(make_pool: Callable[..., RewardPool]) -> None:
    """Limits whose processes x address space exceed the per-case ceiling fail the preflight."""
    pool = make_pool(workers=1, limits=Limits(nproc=32, address_space_bytes=512 << 20))
    with pytest.raises(PreflightError, match="case_memory_bounded"):
        await pool.code_reward([CORRECT], [TOTAL])
    assert pool.ledger == []


async def bare_worker(emulator: Emulator, run_id: str) -> tuple[WorkerClient, Worker]:
    """One worker sandbox without a pool: the runner's own answers, seen through the real SDK."""
    client = WorkerClient(
        template="base", run_id=run_id, lifetime_seconds=120, request_timeout=15, api_opts=emulator.sdk_opts()
    )
    return client, await client.create()


@pytest.mark.full
async def test_cases_of_a_candidate_run_side_by_side_each_in_its_own_user_namespace(
    emulator: Emulator, runner_supported: None
) -> None:
    """The runner starts every case at once, each as uid 65534 in a user namespace of its own."""
    client, worker = await bare_worker(emulator, "side-by-side")
    try:
        preflight = await client.install_and_preflight(worker, Payload("preflight", probe_source(), [], 5.0))
        assert preflight["parallel"] == Limits().parallel_cases == 4
        sleeper = (
            b"import os, sys, time\ntime.sleep(3)\n"
            b"print(os.stat('/proc/self/ns/user').st_ino, os.getuid(), sys.stdin.read())\n"
        )
        answer = await client.run(worker, Payload("run", sleeper, [b"a", b"b", b"c"], 10.0), 60)
    finally:
        await client.kill(worker.sandbox_id)
    cases = answer["cases"]
    printed = [base64.b64decode(c["output_b64"]).decode().split() for c in cases]
    assert [p[2] for p in printed] == ["a", "b", "c"]
    assert len({p[0] for p in printed}) == 3  # a user namespace each
    assert {p[1] for p in printed} == {"65534"}
    assert {c["uid"] for c in cases} == {65534}
    assert max(c["started"] for c in cases) < min(c["ended"] for c in cases)  # all ran at once


@pytest.mark.full
async def test_a_fork_bomb_case_does_not_fail_its_siblings(make_pool: Callable[..., RewardPool]) -> None:
    """Cases side by side share no process count: a fork bomb fails its own case, never a sibling's start."""
    # More cases than run at once: the later ones start while the bomb holds its process limit.
    siblings = (TOTAL * Limits().parallel_cases)[: Limits().parallel_cases + 2]
    cases = [
        {"input": json.dumps([{"customer": "bomb", "tokens": 1}]), "output": json.dumps({"bomb": 1})},
        *siblings,
    ]
    pool = make_pool(workers=1)
    scores = await pool.code_reward([completion(program("fork_bomb_one_case")), CORRECT], [cases, TOTAL])
    assert scores == [pytest.approx(len(siblings) / len(cases)), 1.0]
    record = [r for r in pool.ledger if r["index"] == 0][-1]
    assert [c["reason"] for c in record["cases"]][1:] == ["passed"] * len(siblings)
    assert record["cases"][0]["reason"] != "passed"
    assert pool.metrics["infrastructure_retries"] == 0
    assert pool.metrics["workers_created"] == 1


async def test_output_over_the_cap_in_every_case_at_once_is_output_too_large(
    make_pool: Callable[..., RewardPool],
) -> None:
    """Cases side by side close their output pipes alone: a writer over the cap gets EPIPE, not a deadline."""
    pool = make_pool(workers=1)
    huge = completion(program("huge_output"))
    cases = (TOTAL * Limits().parallel_cases)[: Limits().parallel_cases]
    for _ in range(2):  # cold cases, then the ones the runner set up ahead
        assert await pool.code_reward([huge], [cases]) == [0.0]
        assert reasons(pool, 0) == {"output_too_large"}


async def _set_up_ahead(worker: Worker, expected: int) -> int:
    """How many cases the persistent runner holds ready (the live children of its zygote, a ``-c``
    program forked beside it or started by it), once it has settled."""
    deadline = time.monotonic() + 15
    while True:
        listing = await worker.sandbox.commands.run(
            f"cat {SERVE_DIR}/pid; ps -eo pid=,ppid=,stat=,args=", user="root"
        )
        recorded, *lines = listing.stdout.splitlines()
        rows = [line.split(None, 3) for line in lines]
        runners = {recorded.strip()}  # the zygote forked beside the runner has its command line too
        zygotes = {pid for pid, ppid, _, args in rows if ppid in runners and " -c " in args}
        ready = sum(1 for _, ppid, stat, _ in rows if ppid in zygotes and not stat.startswith("Z"))
        if ready == expected or time.monotonic() > deadline:
            return ready
        await asyncio.sleep(0.2)


async def test_the_runner_sets_up_as_many_cases_as_the_last_request_ran(
    emulator: Emulator, runner_supported: None
) -> None:
    """One input: one case set up for the next request, not parallel_cases; never more than that."""
    client, worker = await bare_worker(emulator, "warm-count")
    try:
        await client.install_and_preflight(worker, Payload("preflight", probe_source(), [], 5.0))
        seen = []
        for count in (1, 3, 6):
            await client.run(worker, Payload("run", b"print(1)\n", [b"x"] * count, 2.0), 60)
            seen.append(await _set_up_ahead(worker, min(count, Limits().parallel_cases)))
    finally:
        await client.kill(worker.sandbox_id)
    assert seen == [1, 3, Limits().parallel_cases]


async def test_cases_set_up_ahead_are_dropped_when_the_limits_change(
    emulator: Emulator, runner_supported: None
) -> None:
    """The persistent runner sets cases up for the next request; another deadline or limit gets fresh ones."""
    client, worker = await bare_worker(emulator, "warm-cases")
    program_bytes = (
        b"import resource, sys\nprint(resource.getrlimit(resource.RLIMIT_CPU)[0], sys.stdin.read())\n"
    )
    try:
        await client.install_and_preflight(worker, Payload("preflight", probe_source(), [], 5.0))
        seen = []
        for seconds in (2.0, 2.0, 5.0, 5.0, 2.0):
            answer = await client.run(worker, Payload("run", program_bytes, [b"x", b"y"], seconds), 60)
            seen.append([base64.b64decode(c["output_b64"]).decode().split() for c in answer["cases"]])
    finally:
        await client.kill(worker.sandbox_id)
    # RLIMIT_CPU is the deadline + 2 s: each answer ran under its own request's limits
    cpu = [["4", "4"], ["4", "4"], ["7", "7"], ["7", "7"], ["4", "4"]]
    assert [[row[0] for row in rows] for rows in seen] == cpu
    assert all([row[1] for row in rows] == ["x", "y"] for rows in seen)


async def test_a_candidate_cannot_copy_another_of_its_batch(make_pool: Callable[..., RewardPool]) -> None:
    """Candidates of one batch part lie on one worker at once; a program hunting for another's
    source (to run it on its own input) finds none: the jobs directory cannot be listed."""
    pool = make_pool(workers=1)
    hostile = completion(program("copy_other_program"))
    assert await pool.code_reward([hostile, CORRECT, CORRECT], [TOTAL] * 3) == [0.0, 1.0, 1.0]
    assert reasons(pool, 0) == {"mismatch"}  # printed null: nothing else was found
    assert len({r["worker_id"] for r in pool.ledger}) == 1  # the three shared one worker
    assert pool.metrics["candidates"] == 3
