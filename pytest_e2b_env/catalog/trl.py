"""TRL's calling convention: the keyword arguments a reward function gets, and what counts as async.

Used where the subject runs (:mod:`~pytest_e2b_env.catalog.execute` builds each call's arguments
there, since TRL's ``trainer_state`` and logging callbacks are objects, not data) and by anyone
who needs to call a reward function exactly as TRL 1.16 does.
"""

from __future__ import annotations

import inspect
import json
from typing import Any

from pytest_e2b_env.catalog.contract import Contract
from pytest_e2b_env.errors import ConfigError


def columns_for(contract: Contract, tests: list[Any]) -> dict[str, list[Any]]:
    """The dataset columns carrying the test cases, in the shape the subject declared."""
    if callable(contract.columns):
        mapped = contract.columns(tests)
        if not isinstance(mapped, dict) or not all(
            isinstance(v, list) and len(v) == len(tests) for v in mapped.values()
        ):
            raise ConfigError(
                f"{contract.source}: columns function must return a dict of lists, one item per completion"
            )
        return mapped
    if contract.columns == "verification_info":
        return {
            "verification_info": [
                {
                    "language": "python",
                    "test_cases": [{**case, "type": "stdin_stdout"} for case in per_completion],
                }
                for per_completion in tests
            ]
        }
    return {"test_cases": tests}


class _TrainerState:
    """What TRL passes as ``trainer_state`` (a ``transformers.TrainerState``): the fields read most."""

    global_step = 0
    epoch = 0.0
    max_steps = 1
    num_train_epochs = 1


def trl_kwargs(
    completions: list[Any],
    tests: list[Any],
    contract: Contract,
    prompt: list[dict[str, Any]] | None = None,
    columns: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Keyword arguments exactly as TRL 1.16's ``_calculate_rewards`` passes them.

    ``prompts``, ``completions``, ``completion_ids``, every dataset column, then
    ``trainer_state``, ``log_extra`` and ``log_metric``. ``prompt`` and ``columns`` are the
    dataset row's, repeated per completion as for a group of generations of one row.
    """
    prompts = [list(prompt or [{"role": "user", "content": "Solve the task."}]) for _ in completions]
    ids = [list(json.dumps(c, default=str).encode()[:64]) for c in completions]
    return {
        "prompts": prompts,
        "completions": completions,
        "completion_ids": ids,
        **{name: [value for _ in completions] for name, value in (columns or {}).items()},
        **columns_for(contract, tests),
        "trainer_state": _TrainerState(),
        "log_extra": lambda *a, **k: None,
        "log_metric": lambda *a, **k: None,
    }


def is_async_callable(fn: Any) -> bool:
    """An ``async def`` function, or an object whose ``__call__`` is one."""
    call = type(fn).__call__ if not inspect.isfunction(fn) else None
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(call)
