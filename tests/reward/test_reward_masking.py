"""on_infrastructure="mask": a candidate the infrastructure lost is None (TRL's unscorable), in budget."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from reward_helpers import TOTAL, completion, program

from pytest_e2b_env.errors import ConfigError, InfrastructureError
from pytest_e2b_env.masking import MaskBudget
from pytest_e2b_env.reward import RewardPool

START = "POST /process.Process/Start"
LOST = "# reward-mask-lost"
HEALTHY = completion(program("total_tokens_correct"))
DOOMED = completion(f"{LOST}\n{program('total_tokens_correct')}")
WRONG = completion(program("total_tokens_wrong"))


def test_budget_allows_one_then_a_fraction_of_everything_seen() -> None:
    """The budget never allows fewer than one masked completion, then mask_budget of all seen."""
    budget = MaskBudget(fraction=0.05, consecutive=8)
    budget.admit([False, True, False, False], "t")
    over = "2 of 8 completions masked for infrastructure failures, over the budget of 1"
    with pytest.raises(InfrastructureError, match=over):
        budget.admit([True, False, False, False], "t")
    assert (budget.seen, budget.masked) == (4, 1)  # a refused batch is not counted
    budget.admit([False] * 36, "t")
    budget.admit([True, False, False, False], "t")  # 2 of 44: 5 % of 44 is 2
    assert budget.as_dict() == {
        "masked": 2,
        "masked_fraction": round(2 / 44, 6),
        "mask_budget": 0.05,
        "mask_consecutive": 8,
    }


def test_budget_counts_masked_in_a_row_across_batches() -> None:
    """mask_consecutive masked completions in a row raise even when the fraction allows them."""
    budget = MaskBudget(fraction=1.0, consecutive=3)
    budget.admit([False, True, True], "t")
    with pytest.raises(InfrastructureError, match="3 completions in a row masked"):
        budget.admit([True, False], "t")
    budget.admit([False, True], "t")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"on_infrastructure": "zero"}, "on_infrastructure='zero' is not one of raise, mask"),
        ({"on_infrastructure": "mask", "mask_budget": 1.5}, "mask_budget=1.5 must be a fraction in [0, 1]"),
        ({"on_infrastructure": "mask", "mask_consecutive": 0}, "mask_consecutive=0 must be an integer >= 1"),
    ],
)
def test_bad_policy_is_rejected_naming_the_value(kwargs: dict[str, Any], message: str) -> None:
    """A bad policy or budget is a ConfigError naming the value."""
    with pytest.raises(ConfigError) as info:
        RewardPool(**kwargs)
    assert message in str(info.value)


@pytest.mark.full
async def test_masked_completion_is_none_and_the_rest_keep_their_scores(
    make_pool: Callable[..., RewardPool], faults: Any
) -> None:
    """Lost twice under mask: that completion is None, the others score in order, ledger has the kind."""
    faults.add(route=START, answer={"lose_sandbox": True}, contains=LOST, times=2)
    pool = make_pool(workers=2, on_infrastructure="mask", mask_budget=0.5)
    assert await pool.code_reward([HEALTHY, DOOMED, WRONG], [TOTAL] * 3) == [1.0, None, 0.0]
    masked = [r for r in pool.ledger if r["reason"] == "masked"]
    assert [(r["index"], r["score"], r["failure_kind"], r["attempts"]) for r in masked] == [
        (1, None, "sandbox_lost", 2)
    ]
    assert len(masked[0]["errors"]) == 2
    metrics = pool.metrics
    assert (metrics["masked"], metrics["masked_fraction"], metrics["on_infrastructure"]) == (
        1,
        round(1 / 3, 6),
        "mask",
    )
    assert [f["index"] for f in pool.failures] == [1]
    # The pool is not poisoned: the next batch scores normally.
    assert await pool.code_reward([HEALTHY], [TOTAL]) == [1.0]


@pytest.mark.full
async def test_over_budget_raises_and_poisons(make_pool: Callable[..., RewardPool], faults: Any) -> None:
    """Every completion of a batch lost twice is over the budget: InfrastructureError, no scores."""
    faults.add(route=START, answer={"lose_sandbox": True}, contains=LOST, times=4)
    pool = make_pool(workers=2, on_infrastructure="mask")
    with pytest.raises(InfrastructureError, match="2 of 2 completions masked for infrastructure"):
        await pool.code_reward([DOOMED, DOOMED], [TOTAL] * 2)
    assert not [r for r in pool.ledger if r["reason"] == "masked"]
    assert pool.metrics["poisoned"] is True
    with pytest.raises(InfrastructureError, match="unusable"):
        await pool.code_reward([HEALTHY], [TOTAL])


async def test_auth_failure_raises_even_when_masking(
    make_pool: Callable[..., RewardPool], faults: Any
) -> None:
    """A 401 is configuration, never masked: the call raises at once."""
    faults.add(route="POST /v2/sandboxes", answer={"status": 401}, times=None)
    pool = make_pool(workers=1, on_infrastructure="mask", mask_budget=1.0)
    with pytest.raises(InfrastructureError, match="refused"):
        await pool.code_reward([HEALTHY], [TOTAL])
