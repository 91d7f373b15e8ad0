"""Case isolation holds against hostile programs: no nested namespaces, keyrings, memory or input leaks."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from reward_helpers import TOTAL, completion, program

from pytest_e2b_env.reward import Isolation, Limits, PreflightError, RewardPool

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
        (Isolation(private_inputs=False), ("inputs_private",)),
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
