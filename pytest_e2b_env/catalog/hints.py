"""Which contract key fits a subject the catalog could not drive as it is (its shape, not its logic).

A reward function that takes the test cases under another column, an episode whose tools have
other names or whose ``reset`` takes the task under another keyword: the catalog calls them as TRL
would with its documented shapes, the calls fail with a ``TypeError`` or a missing tool, and case
after case fails the same way. These hints name the ``e2b_contract`` key that declares the shape
(docs: ``pytest-e2b-env docs catalog``, "Declaring it"). They are advice in the case's record; the
terminal summary says each once per run.
"""

from __future__ import annotations

from pytest_e2b_env.catalog.contract import Contract
from pytest_e2b_env.catalog.observe import Call, Observation
from pytest_e2b_env.catalog.trlshape import ENV_REWARD

#: How a hint begins in a record's advice (the reporter finds them by it).
PREFIX = "contract: "
DOCS = "pytest-e2b-env docs catalog"
_REWARD_CALLS = ("reward", "second_batch")


def _signature_error(call: Call) -> str | None:
    error = call.error or {}
    message = str(error.get("message", ""))
    if error.get("type") == "TypeError" and "argument" in message:
        return message
    return None


def _no_reward(obs: Observation, call: Call) -> bool:
    """A class without ``get_reward()`` whose ``env.reward`` does not exist."""
    error = call.error or {}
    return (
        str(obs.reward_source or "").startswith(ENV_REWARD)
        and error.get("type") == "AttributeError"
        and "attribute 'reward'" in str(error.get("message", ""))
    )


def shape_hints(obs: Observation, contract: Contract) -> list[str]:
    """The contract keys that would let the catalog drive this subject, each said once."""
    hints: list[str] = []
    roles = {method: role for role, method in contract.tools.items()}
    for call in obs.calls:
        wrong = _signature_error(call)
        if obs.subject == "reward" and call.name in _REWARD_CALLS and wrong:
            hints.append(
                f"the reward function does not take the columns the catalog passes ({wrong}): declare "
                f"the dataset columns it reads with the contract key 'columns' ({DOCS})"
            )
        elif obs.subject == "episode" and call.name == "reset" and wrong:
            hints.append(
                f"reset() does not take the task as the catalog passes it ({wrong}): declare its keyword "
                f"with 'task_arg' (and 'task': 'dict' for a dict) ({DOCS})"
            )
        elif obs.subject == "episode" and (call.error or {}).get("type") == "NoSuchTool":
            method = str((call.error or {}).get("message", ""))
            role = roles.get(method, call.name)
            hints.append(
                f"the episode has no method {method!r} for the catalog's {role!r} tool: map the catalog's "
                f"tools to its methods with 'tools', e.g. {{{role!r}: 'your_method'}} ({DOCS})"
            )
        elif obs.subject == "episode" and call.name == "get_reward" and _no_reward(obs, call):
            hints.append(
                "the class has no get_reward() and no 'reward' attribute: TRL scores an environment through "
                "get_reward(), or a reward function reading env.reward; define one of them "
                f"({DOCS})"
            )
        elif obs.subject == "episode" and call.name == "terminal" and wrong:
            hints.append(
                f"the terminal tool does not take the command as the catalog passes it ({wrong}): name "
                f"its argument with 'command_arg' ({DOCS})"
            )
    return [PREFIX + hint for hint in dict.fromkeys(hints)]
