"""Every branch of the failure policy, with faults injected on the wire of the emulator."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from reward_helpers import TOTAL, completion, program

from pytest_e2b_env.emulator import Emulator
from pytest_e2b_env.errors import CleanupError, ConfigError, InfrastructureError
from pytest_e2b_env.reward import Isolation, PreflightError, RewardPool

pytestmark = pytest.mark.namespaces

START = "POST /process.Process/Start"
MARK = "# reward-fault-target"
CORRECT = completion(f"{MARK}\n{program('total_tokens_correct')}")


def workers_alive(emulator: Emulator, pool: RewardPool) -> list[str]:
    """Live sandboxes of this pool's run, as the emulator sees them."""
    return [
        s["sandbox_id"]
        for s in emulator.sandboxes()
        if (s.get("metadata") or {}).get("pytest_e2b_env_run") == pool.run_id
    ]


async def test_lost_worker_is_retried_once_on_a_replacement(
    make_pool: Callable[..., RewardPool], faults: Any, emulator: Emulator
) -> None:
    """A worker lost mid-evaluation is replaced once and the candidate still scores right."""
    faults.add(route=START, answer={"lose_sandbox": True}, contains=MARK, times=1)
    pool = make_pool(workers=1)
    assert await pool.code_reward([CORRECT], [TOTAL]) == [1.0]
    metrics = pool.metrics
    assert (metrics["workers_created"], metrics["workers_replaced"], metrics["infrastructure_retries"]) == (
        2,
        1,
        1,
    )
    record = pool.ledger[0]
    assert record["attempts"] == 2
    assert record["errors"]
    assert "Sandbox" in record["errors"][0]
    assert len(workers_alive(emulator, pool)) == 1


async def test_lost_twice_raises_and_poisons(make_pool: Callable[..., RewardPool], faults: Any) -> None:
    """Lost on the replacement too: InfrastructureError, no scores, and the pool stays unusable."""
    faults.add(route=START, answer={"lose_sandbox": True}, contains=MARK, times=2)
    pool = make_pool(workers=1)
    with pytest.raises(InfrastructureError, match="worker failed twice"):
        await pool.code_reward([CORRECT], [TOTAL])
    assert pool.ledger == []
    assert [f["index"] for f in pool.failures] == [0]
    assert "worker failed twice" in pool.failures[0]["error"]
    with pytest.raises(InfrastructureError, match="unusable"):
        await pool.code_reward([completion(program("total_tokens_correct"))], [TOTAL])


async def test_rate_limited_create_waits_and_succeeds(
    make_pool: Callable[..., RewardPool], faults: Any, emulator: Emulator
) -> None:
    """429 with Retry-After on create: creation waits, succeeds, and the candidate scores."""
    faults.add(route="POST /v2/sandboxes", answer={"status": 429, "retry_after": 1}, times=1)
    mark = emulator.ledger_mark()
    pool = make_pool(workers=1)
    assert await pool.code_reward([CORRECT], [TOTAL]) == [1.0]
    creates = [e["status"] for e in emulator.ledger(since=mark) if e["op"] in {"create", "fault"}]
    assert creates[:2] == [429, 201] or creates[:2] == [429, 200]


async def test_rate_limit_exhausted_aborts(make_pool: Callable[..., RewardPool], faults: Any) -> None:
    """429 on every create: InfrastructureError after two attempts, never a zero."""
    faults.add(route="POST /v2/sandboxes", answer={"status": 429, "retry_after": 0}, times=None)
    pool = make_pool(workers=1)
    with pytest.raises(InfrastructureError, match="RateLimitException"):
        await pool.code_reward([CORRECT], [TOTAL])
    assert pool.metrics["create_attempts"] == 2
    assert pool.ledger == []


async def test_auth_failure_aborts_at_once(make_pool: Callable[..., RewardPool], faults: Any) -> None:
    """401 on create: InfrastructureError naming AuthenticationException, one attempt, no scores."""
    faults.add(route="POST /v2/sandboxes", answer={"status": 401}, times=None)
    pool = make_pool(workers=2)
    with pytest.raises(InfrastructureError, match="AuthenticationException"):
        await pool.code_reward([CORRECT, CORRECT], [TOTAL, TOTAL])
    assert pool.metrics["infrastructure_retries"] == 0
    assert pool.ledger == []


async def test_auth_failure_mid_run_is_not_retried(make_pool: Callable[..., RewardPool], faults: Any) -> None:
    """401 from envd while running a candidate aborts without a retry."""
    faults.add(route=START, answer={"status": 401}, contains=MARK, times=None)
    pool = make_pool(workers=1)
    with pytest.raises(InfrastructureError, match="not retried"):
        await pool.code_reward([CORRECT], [TOTAL])
    assert pool.metrics["infrastructure_retries"] == 0


@pytest.mark.full
async def test_kill_failure_raises_cleanup_error_with_ids(
    make_pool: Callable[..., RewardPool], faults: Any, emulator: Emulator
) -> None:
    """Workers that refuse to die: close() raises CleanupError naming exactly their ids."""
    pool = make_pool(workers=2)
    assert await pool.code_reward([CORRECT, CORRECT], [TOTAL, TOTAL]) == [1.0, 1.0]
    alive = sorted(workers_alive(emulator, pool))
    assert len(alive) == 2
    faults.add(route="DELETE /sandboxes/*", answer={"kill_fails": True}, times=None)
    with pytest.raises(CleanupError) as caught:
        await pool.close()
    assert sorted(caught.value.ids) == alive
    assert sorted(pool.kill_failures) == alive
    faults.clear()
    await pool.close()  # the kill works again: nothing is left
    assert workers_alive(emulator, pool) == []


async def test_cancellation_poisons_and_close_kills_all(
    make_pool: Callable[..., RewardPool], emulator: Emulator
) -> None:
    """Cancelling a batch mid-run poisons the pool; close() still kills every worker."""
    pool = make_pool(workers=2, case_seconds=10.0)
    sleeper = completion(program("sleep_past_deadline"))
    task = asyncio.ensure_future(pool.code_reward([sleeper, sleeper], [TOTAL, TOTAL]))
    for _ in range(200):
        if len(pool._owned) == 2:
            break
        await asyncio.sleep(0.05)
    await asyncio.sleep(1.0)  # both candidates are now running inside their workers
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    with pytest.raises(InfrastructureError, match="cancelled"):
        await pool.code_reward([CORRECT], [TOTAL])
    await pool.close()
    assert workers_alive(emulator, pool) == []


async def test_transient_renewal_failure_is_retried(
    make_pool: Callable[..., RewardPool], faults: Any
) -> None:
    """A lifetime renewal that fails once (500) is retried by the heartbeat; the pool stays usable."""
    faults.add(route="POST /sandboxes/*/timeout", answer={"status": 500}, times=1)
    pool = make_pool(workers=1, lifetime_seconds=30, renew_every=0.3)
    assert await pool.code_reward([CORRECT], [TOTAL]) == [1.0]
    for _ in range(100):
        if pool.metrics["renewals"] >= 1:
            break
        await asyncio.sleep(0.1)
    metrics = pool.metrics
    assert metrics["renewal_failures"] == 1
    assert metrics["renewals"] >= 1
    assert not metrics["poisoned"]
    assert await pool.code_reward([CORRECT], [TOTAL]) == [1.0]


@pytest.mark.parametrize(
    ("weaker", "failed_check"),
    [
        (Isolation(network=False), "net_namespace"),
        (Isolation(pid=False), "pid_namespace"),
        (Isolation(readonly_root=False), "root_readonly"),
        (Isolation(drop_privileges=False), "uid_nobody"),
        (Isolation(no_new_privs=False), "no_new_privs"),
    ],
)
async def test_preflight_failure_aborts(
    make_pool: Callable[..., RewardPool], emulator: Emulator, weaker: Isolation, failed_check: str
) -> None:
    """A worker whose case isolation is weaker fails the preflight: abort, no candidate runs."""
    pool = make_pool(workers=1, isolation=weaker)
    with pytest.raises(PreflightError, match=failed_check):
        await pool.code_reward([CORRECT], [TOTAL])
    assert pool.ledger == []
    with pytest.raises(InfrastructureError):
        await pool.code_reward([CORRECT], [TOTAL])
    await pool.close()
    assert workers_alive(emulator, pool) == []


async def test_worker_tags_and_no_internet(make_pool: Callable[..., RewardPool], emulator: Emulator) -> None:
    """Workers carry the run-id metadata, role and no internet access."""
    pool = make_pool(workers=1, run_id="tagged-run")
    assert await pool.code_reward([CORRECT], [TOTAL]) == [1.0]
    (sandbox,) = [
        s for s in emulator.sandboxes() if (s.get("metadata") or {}).get("pytest_e2b_env_run") == "tagged-run"
    ]
    tags = sandbox["metadata"]
    assert tags == {"pytest_e2b_env_run": "tagged-run", "role": "reward-worker", "pool": tags["pool"]}
    assert len(tags["pool"]) == 12
    assert sandbox["allow_internet_access"] is False


def test_batch_validation_names_the_bad_value() -> None:
    """Malformed batches are ConfigError naming the index and the fix, before any sandbox."""
    pool = RewardPool(workers=1)
    with pytest.raises(ConfigError, match="2 completions but 1 test_cases"):
        asyncio.run(pool.code_reward([CORRECT, CORRECT], [TOTAL]))
    with pytest.raises(ConfigError, match=r"test_cases\[0\]\[0\] is not strict JSON"):
        asyncio.run(pool.code_reward([CORRECT], [[{"input": "[]", "output": "{'a': 1}"}]]))
    with pytest.raises(ConfigError, match=r"test_cases\[0\] must be a non-empty list"):
        asyncio.run(pool.code_reward([CORRECT], [[]]))
    with pytest.raises(ConfigError, match="workers=0"):
        RewardPool(workers=0)


async def test_closed_pool_refuses_work(make_pool: Callable[..., RewardPool]) -> None:
    """A closed pool raises InfrastructureError instead of scoring."""
    pool = make_pool()
    await pool.close()
    with pytest.raises(InfrastructureError, match="closed"):
        await pool.code_reward([CORRECT], [TOTAL])


async def test_refused_renewal_aborts(make_pool: Callable[..., RewardPool], faults: Any) -> None:
    """A lifetime renewal answered 401 is a configuration fault: InfrastructureError, no score."""
    faults.add(route="POST /sandboxes/*/timeout", answer={"status": 401}, times=None)
    pool = make_pool(workers=1)
    with pytest.raises(InfrastructureError, match="renewal refused"):
        await pool.code_reward([CORRECT], [TOTAL])
    assert pool.ledger == []


@pytest.mark.full
async def test_close_is_bounded_when_a_step_hangs(
    make_pool: Callable[..., RewardPool], emulator: Emulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A kill that never answers makes close() a CleanupError naming the step and the worker, not a hang."""
    pool = make_pool(workers=1)
    assert await pool.code_reward([CORRECT], [TOTAL]) == [1.0]
    (worker,) = workers_alive(emulator, pool)

    async def wedged(sandbox_id: str) -> None:
        await asyncio.Event().wait()  # an SDK call that outlives every timeout

    monkeypatch.setattr(pool._client, "kill", wedged)
    monkeypatch.setattr(pool._client, "request_timeout", 0.25)
    assert pool.close_seconds() == pytest.approx(7.0)
    stuck = r"close did not finish in 7 s \(stuck in: killing 1 worker"
    with pytest.raises(CleanupError, match=stuck) as info:
        await pool.close()
    assert info.value.ids == (worker,)
    assert "reap --run-id" in str(info.value)
    monkeypatch.undo()  # the fixture's close then kills the worker for real (and checks it)


@pytest.mark.full
async def test_a_lost_part_retries_each_candidate_alone(
    make_pool: Callable[..., RewardPool], faults: Any
) -> None:
    """Three candidates go to one worker in one command; lost once (the fault follows the marked
    program), each gets its second attempt on its own and all three still score right."""
    faults.add(route=START, answer={"lose_sandbox": True}, contains=MARK, times=1)
    pool = make_pool(workers=1)
    partial = completion(program("total_tokens_partial"))
    wrong = completion(program("total_tokens_wrong"))
    assert await pool.code_reward([partial, CORRECT, wrong], [TOTAL] * 3) == [2 / 3, 1.0, 0.0]
    assert sorted((r["index"], r["attempts"]) for r in pool.ledger) == [(0, 2), (1, 2), (2, 2)]
    assert all("Sandbox" in r["errors"][0] for r in pool.ledger)  # the part's loss, on each
    assert pool.metrics["infrastructure_retries"] == 3


@pytest.mark.full
async def test_a_part_lost_twice_masks_only_the_candidate_the_fault_follows(
    make_pool: Callable[..., RewardPool], faults: Any
) -> None:
    """Lost as a part and then alone: only the marked candidate is masked, the others keep their
    scores in order (as TRL needs them)."""
    faults.add(route=START, answer={"lose_sandbox": True}, contains=MARK, times=2)
    pool = make_pool(workers=1, on_infrastructure="mask", mask_budget=0.5, mask_consecutive=3)
    partial = completion(program("total_tokens_partial"))
    wrong = completion(program("total_tokens_wrong"))
    assert await pool.code_reward([partial, CORRECT, wrong], [TOTAL] * 3) == [2 / 3, None, 0.0]
    assert [f["index"] for f in pool.failures] == [1]
