"""Host-side grading: a program's stdout against the trusted expected JSON value, types kept.

A case passes when the program exited 0 inside its deadline, printed at most the output cap,
and its stdout is exactly one JSON value (surrounding whitespace allowed) equal to the expected
one with types kept: ``1``, ``1.0`` and ``true`` are three different answers. Duplicate object
keys, ``NaN`` and ``Infinity`` make the output bad (``bad_json``), as does invalid UTF-8.
"""

from __future__ import annotations

import json
import math
from typing import Any

OUTPUT_LIMIT_BYTES = 65536


class BadJSON(ValueError):
    """The text is not one strict JSON value."""


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise BadJSON(f"duplicate key {key[:40]!r}")
        result[key] = value
    return result


def _no_constant(name: str) -> Any:
    raise BadJSON(f"{name} is not JSON")


def parse_strict(text: str | bytes) -> Any:
    """Parse exactly one JSON value; raise :class:`BadJSON` for anything else."""
    try:
        if isinstance(text, bytes):
            text = text.decode("utf-8")
        value = json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_no_constant)
    except BadJSON:
        raise
    except (ValueError, RecursionError, MemoryError) as exc:  # UnicodeDecodeError is a ValueError
        raise BadJSON(type(exc).__name__) from None
    return value


def typed_equal(actual: Any, expected: Any) -> bool:
    """JSON equality with types kept: bool, int and float never compare equal to each other."""
    if type(actual) is not type(expected):
        return False
    if isinstance(expected, dict):
        return actual.keys() == expected.keys() and all(
            typed_equal(actual[k], v) for k, v in expected.items()
        )
    if isinstance(expected, list):
        return len(actual) == len(expected) and all(map(typed_equal, actual, expected))
    if isinstance(expected, float):
        return actual == expected and not math.isnan(actual)
    return bool(actual == expected)


def grade_output(
    exit_code: int | None, timed_out: bool, output: bytes, truncated: bool, expected: Any
) -> str:
    """The reason of one case: ``passed`` or the first thing that failed."""
    if timed_out:
        return "timeout"
    if truncated or len(output) > OUTPUT_LIMIT_BYTES:
        return "output_too_large"
    if exit_code != 0:
        return "nonzero_exit"
    try:
        actual = parse_strict(output)
    except BadJSON:
        return "bad_json"
    return "passed" if typed_equal(actual, expected) else "mismatch"
