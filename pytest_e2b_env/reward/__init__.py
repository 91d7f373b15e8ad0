"""Reference reward code: a pool of E2B worker sandboxes scoring generated programs for TRL GRPO.

``RewardPool(...).code_reward`` is TRL's async custom reward; ``reward_subject`` is the catalog's
subject factory for it. The runner and probe that run inside the workers are
``pytest_e2b_env.standalone.reward_runner`` and ``reward_probe``.
"""

from __future__ import annotations

from pytest_e2b_env.errors import PreflightError
from pytest_e2b_env.reward.extract import Extracted, extract_code
from pytest_e2b_env.reward.grading import grade_output, parse_strict, typed_equal
from pytest_e2b_env.reward.pool import RewardPool
from pytest_e2b_env.reward.protocol import Isolation, Limits
from pytest_e2b_env.reward.subject import masking_reward_subject, reward_subject

__all__ = [
    "Extracted",
    "Isolation",
    "Limits",
    "PreflightError",
    "RewardPool",
    "extract_code",
    "grade_output",
    "masking_reward_subject",
    "parse_strict",
    "reward_subject",
    "typed_equal",
]
