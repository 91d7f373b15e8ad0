"""Raw outcomes of subject calls, as they travel from where the subject runs to the controller.

The case host sends what a call returned or raised and nothing else; the controller judges it.
A returned value crosses as JSON: ``None``, bools, numbers, strings, lists and dicts as they are
(subclasses as their base type, tuples as lists), anything else as an :class:`Opaque` that prints
as the object did (``str`` and ``repr``) and is never a number, so every verdict reads the value
as it would have read the object itself. An exception crosses as its type, the names of its
class hierarchy and its message.
"""

from __future__ import annotations

import json
from typing import Any

from pytest_e2b_env.wire.jsonin import loads_bounded

#: The key marking an encoded :class:`Opaque`.
OPAQUE = "$opaque"
#: Longest string kept of a value (a tool's observation, an exception message), in characters.
STRING_LIMIT = 1 << 20
#: Items kept of one list or dict, and nesting kept, of a returned value.
ITEM_LIMIT = 10_000
DEPTH_LIMIT = 24
#: The controller refuses a reply nesting deeper than this (the encoding stays well below it).
REPLY_DEPTH = 64
#: An exception message is cut here on the subject's side (the controller cuts it shorter).
RAW_MESSAGE = 4000


class Opaque:
    """A value of the subject's that is not plain JSON (a numpy number, an object), seen from outside."""

    __slots__ = ("shown", "text", "type_name")

    def __init__(self, type_name: str, text: str, shown: str) -> None:
        self.type_name = type_name
        self.text = text
        self.shown = shown

    def __str__(self) -> str:
        return self.text

    def __repr__(self) -> str:
        return self.shown


def _printed(fn: Any, value: Any) -> str:
    try:
        return str(fn(value))[:STRING_LIMIT]
    except Exception as exc:  # the subject's __str__ / __repr__ may raise
        return f"<{type(value).__name__} that could not be printed: {type(exc).__name__}>"


def encode(value: Any, depth: int = 0) -> Any:
    """A JSON-safe copy of a value the subject returned (runs where the subject runs)."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, str):
        return str(value)[:STRING_LIMIT]
    if depth < DEPTH_LIMIT:
        if isinstance(value, list | tuple):
            return [encode(v, depth + 1) for v in list(value)[:ITEM_LIMIT]]
        if isinstance(value, dict):
            return {_key(k): encode(v, depth + 1) for k, v in list(value.items())[:ITEM_LIMIT]}
    return {
        OPAQUE: {"type": type(value).__name__, "str": _printed(str, value), "repr": _printed(repr, value)}
    }


def _key(key: Any) -> str:
    return key if isinstance(key, str) else _printed(str, key)


def decode(value: Any) -> Any:
    """The controller's copy of an encoded value (:class:`Opaque` for what was not plain JSON)."""
    if isinstance(value, list):
        return [decode(v) for v in value]
    if isinstance(value, dict):
        inner = value.get(OPAQUE)
        if len(value) == 1 and isinstance(inner, dict):
            return Opaque(str(inner.get("type")), str(inner.get("str")), str(inner.get("repr")))
        return {str(k): decode(v) for k, v in value.items()}
    return value


def raised(exc: BaseException) -> dict[str, Any]:
    """What the controller learns of an exception the subject raised (runs where the subject runs)."""
    return {
        "type": type(exc).__name__,
        "hierarchy": [cls.__name__ for cls in type(exc).__mro__ if cls not in (object, BaseException)],
        "message": _printed(str, exc)[:RAW_MESSAGE],
    }


def dumps(message: dict[str, Any]) -> bytes:
    """One message as a JSON line (NaN and infinities kept: both ends are Python)."""
    return (json.dumps(message, default=str) + "\n").encode()


def loads(line: bytes) -> dict[str, Any]:
    """One message from the other side, bounded in nesting; ValueError if it is not an object."""
    message = loads_bounded(line, REPLY_DEPTH)
    if not isinstance(message, dict):
        raise ValueError(f"a message must be a JSON object, got {type(message).__name__}")
    return message
