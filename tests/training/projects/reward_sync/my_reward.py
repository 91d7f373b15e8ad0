"""A user's reward in their own shape: a plain SYNC function scoring a ``verification_info`` column.

The sample project the training tests validate and then train (tests/training/test_train_project.py).
Its dataset column is ``verification_info`` (open-r1's name), declared in ``e2b_contract``; scoring and
sandboxes are the sync sample's (``fixtures/subjects/baseline_reward_sync.py``: one ``e2b.Sandbox`` per
completion, killed in ``finally``), which the project's ``pythonpath`` reaches.
"""

from __future__ import annotations

from typing import Any

from baseline_reward_sync import extract_code, score_completion


def code_reward(
    completions: list[Any], verification_info: list[dict[str, Any]], **kwargs: Any
) -> list[float]:
    """TRL reward: the fraction of its row's test cases each completion's program passes."""
    rewards = []
    for completion, info in zip(completions, verification_info, strict=True):
        code = extract_code(completion)
        rewards.append(0.0 if code is None else score_completion(code, info["test_cases"]))
    return rewards


def make_reward() -> Any:
    """Factory for the catalog and for training: the reward function itself."""
    return code_reward


make_reward.e2b_contract = {"columns": "verification_info"}  # type: ignore[attr-defined]
