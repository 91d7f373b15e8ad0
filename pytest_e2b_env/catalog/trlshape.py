"""What TRL reads of an environment class besides its tools: the reward, the tools' arguments, the factory.

Runs where the subject runs (the case host), on the subject's own objects, and answers data only.

* The reward (TRL 1.16, ``GRPOTrainer.__init__``): a class whose functions
  (``inspect.getmembers(cls, inspect.isfunction)``) include ``get_reward`` owns its reward, called
  once per finished rollout. Otherwise the reward is read by an ordinary reward function, which
  TRL passes ``environments=`` (the instance of each completion, in order); TRL's documented one,
  and its Harbor environments', reads ``env.reward`` after the rollout: an instance attribute, a
  class attribute or a property (Harbor computes it lazily, on first read).
* A tool's arguments: the model calls ``tool(**arguments)`` with names from the tool's signature
  (TRL builds the schema from it), so a tool is described by its parameters.
* ``AsyncGRPOTrainer`` hands ``environment_factory`` to a spawned rollout worker: it pickles it
  first (``AsyncRolloutWorker.start``) and refuses to start when that raises ``PicklingError``,
  ``AttributeError`` or ``TypeError`` (a lambda, a closure, a partial over a lock).
"""

from __future__ import annotations

import inspect
import pickle
from typing import Any

from pytest_e2b_env.toolsurface import tool_names

#: How the catalog names where an episode's reward comes from.
GET_REWARD = "get_reward()"
ENV_REWARD = "env.reward"


def owns_reward(cls: type) -> bool:
    """Whether TRL calls ``get_reward()`` on this class (a function of that name on the class)."""
    return any(name == "get_reward" for name, _ in inspect.getmembers(cls, predicate=inspect.isfunction))


def documented_reward(environments: list[Any], **kwargs: Any) -> list[Any]:
    """TRL's documented reward function for an environment without ``get_reward``."""
    return [env.reward for env in environments]


def reward_shape(env: Any) -> str:
    """What ``env.reward`` is before it is read: property, attribute, method or missing."""
    missing = object()
    found = inspect.getattr_static(env, "reward", missing)
    if found is missing:
        return "missing"
    if inspect.isfunction(found) or isinstance(found, staticmethod | classmethod):
        return "method"
    if hasattr(type(found), "__get__") and not isinstance(found, str | bytes | int | float | bool):
        return "property"
    return "attribute"


def _annotation(param: inspect.Parameter) -> str | None:
    note = param.annotation
    if note is inspect.Parameter.empty:
        return None
    if isinstance(note, str):  # ``from __future__ import annotations``: the text as written
        return note
    return getattr(note, "__name__", None) or str(note)


def tool_params(cls: type) -> dict[str, list[dict[str, Any]]]:
    """Each model tool's parameters as the model names them: name, annotation, required, kind."""
    out: dict[str, list[dict[str, Any]]] = {}
    for name in tool_names(cls):
        raw = inspect.getattr_static(cls, name)
        function = raw.__func__ if isinstance(raw, staticmethod) else raw
        try:
            params = list(inspect.signature(function).parameters.values())
        except (TypeError, ValueError):  # a builtin or an odd callable: no signature to read
            out[name] = []
            continue
        if not isinstance(raw, staticmethod) and params:
            params = params[1:]  # self
        out[name] = [
            {
                "name": p.name,
                "annotation": _annotation(p),
                "required": p.default is inspect.Parameter.empty
                and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD),
                "kind": p.kind.name,
            }
            for p in params
        ]
    return out


def pickle_problem(factory: Any) -> str | None:
    """Why ``AsyncGRPOTrainer`` could not pickle this ``environment_factory``, or None."""
    try:
        pickle.dumps(factory)
    except (pickle.PicklingError, AttributeError, TypeError) as exc:
        return f"{type(exc).__name__}: {exc}"[:300]
    return None
