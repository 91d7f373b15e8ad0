"""JSON from untrusted request bodies, bounded in nesting before the recursive parser sees it.

``json.loads`` recurses once per nesting level, so a body of a few thousand ``[`` raises
RecursionError (a 500 with a traceback). The depth is measured first, without recursion.
"""

from __future__ import annotations

import itertools
import json
import re
from typing import Any

_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)
_DELTA = {ord("["): 1, ord("{"): 1, ord("]"): -1, ord("}"): -1}
_NOT_BRACKETS = bytes(b for b in range(256) if b not in _DELTA)


class JSONTooDeep(ValueError):
    """A JSON body nests deeper than allowed."""


def depth_of(raw: bytes) -> int:
    """The deepest nesting of arrays and objects in ``raw`` (strings ignored)."""
    brackets = _STRING.sub(b"", raw).translate(None, _NOT_BRACKETS)
    if len(brackets) < 2:
        return len(brackets)
    return max(0, *itertools.accumulate(_DELTA[b] for b in brackets))


def loads_bounded(raw: bytes | str, max_depth: int) -> Any:
    """``json.loads`` of a body nesting at most ``max_depth`` levels (JSONTooDeep beyond)."""
    data = raw.encode() if isinstance(raw, str) else raw
    depth = depth_of(data)
    if depth > max_depth:
        raise JSONTooDeep(f"JSON nests {depth} levels deep, more than the limit of {max_depth}")
    return json.loads(data)
