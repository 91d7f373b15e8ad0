"""Normalising what callers hand the writer: bounded, JSON-safe copies with every field present.

Nothing is dropped here: a malformed record is kept with its fields filled in, and what was
wrong with it is returned as a problem so that the run is marked incomplete.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping
from typing import Any

#: "relaxed": only house-policy criteria the user relaxed by name failed (a warning, not a pass)
STATUSES = ("passed", "relaxed", "failed", "skipped", "error")
# One string in a record (a captured stdout, an exception message) keeps at most this many
# characters; sandbox payloads can be arbitrarily large and the bundle must stay small.
MAX_STRING = 64 * 1024
MAX_LIST = 5000


def criterion(
    cid: str,
    description: str,
    passed: bool,
    expected: Any,
    actual: Any,
    *,
    policy: str | None = None,
    relaxed: bool = False,
) -> dict[str, Any]:
    """One criterion of a case report, in the OpenEnv validate style, with its severity.

    ``severity`` is ``safety`` (never relaxable) or ``policy`` (house policy, named by ``policy``);
    ``relaxed`` marks a failed policy criterion the user relaxed by name.
    """
    return {
        "id": cid,
        "description": description,
        "passed": bool(passed),
        "expected": expected,
        "actual": actual,
        "severity": "policy" if policy else "safety",
        "policy": policy,
        "relaxed": bool(relaxed and policy and not passed),
    }


def bound(value: Any, limit: int = MAX_STRING, redact: Callable[[str], str] | None = None) -> Any:
    """A JSON-safe copy of ``value``: long strings and lists cut with a visible note, NaN named.

    ``redact`` is applied to the text made of what is not a string (bytes, ``repr()``) before it
    is cut; strings are cut as given (redact them first).
    """
    made = redact or str
    if isinstance(value, str):
        return bound_text(value, limit)
    if value is None or isinstance(value, bool | int):
        return value
    if isinstance(value, float):
        # JSON has no NaN/Infinity; a NaN reward is exactly what a reviewer must see, so name it.
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, Mapping):
        return {
            bound_text(k if isinstance(k, str) else made(str(k)), 512): bound(v, limit, redact)
            for k, v in value.items()
        }
    if isinstance(value, list | tuple | set | frozenset):
        items = list(value)
        out = [bound(v, limit, redact) for v in items[:MAX_LIST]]
        if len(items) > MAX_LIST:
            out.append(f"[... {len(items) - MAX_LIST} more items truncated ...]")
        return out
    if isinstance(value, bytes):
        return bound_text(made(value.decode("utf-8", "backslashreplace")), limit)
    try:
        text = repr(value)
    except Exception as exc:  # a hostile __repr__ must not lose the record
        text = f"<unrepresentable {type(value).__name__}: {type(exc).__name__}>"
    return bound_text(made(text), limit)


def bound_text(text: str, limit: int = MAX_STRING) -> str:
    """``text`` cut to about ``limit`` characters, keeping head and tail around a visible note."""
    if len(text) <= limit:
        return text
    keep = max(limit // 2, 1)
    return f"{text[:keep]}\n[... {len(text) - 2 * keep} characters truncated ...]\n{text[-keep:]}"


def normalize_case(
    record: Any, index: int, redact: Callable[[str], str] | None = None
) -> tuple[dict[str, Any], list[str]]:
    """A complete case record (every field of the contract present) and the problems found in it.

    ``redact``: as for :func:`bound` (pass a record whose strings are redacted already).
    """
    problems: list[str] = []
    if not isinstance(record, Mapping):
        problems.append(f"case record #{index} is a {type(record).__name__}, not a dict; kept as text")
        record = {"id": f"invalid-record-{index}", "status": "error", "reason": bound(record, redact=redact)}
    data = bound(dict(record), redact=redact)
    case_id = data.get("id")
    if not isinstance(case_id, str) or not case_id.strip():
        problems.append(f"case record #{index} has id {case_id!r}; expected a non-empty string")
        case_id = f"invalid-id-{index}"
    status = data.get("status")
    reason = data.get("reason")
    if status not in STATUSES:
        problems.append(
            f"case {case_id}: status {status!r} is not one of {', '.join(STATUSES)}; recorded as error"
        )
        reason = f"invalid status {status!r}" + (f": {reason}" if reason else "")
        status = "error"
    if status == "skipped" and not reason:
        problems.append(f"case {case_id}: skipped without a reason; every skip must say why")
    out: dict[str, Any] = {
        "id": case_id,
        "subject": _text_or(data.get("subject"), "unknown"),
        "family": _text_or(data.get("family"), "unknown"),
        "description": _text_or(data.get("description"), ""),
        "status": status,
        "reason": None if reason is None else str(reason),
        "expected": _dict(data.get("expected")),
        "observed": _dict(data.get("observed")),
        "criteria": [_criterion(c, i) for i, c in enumerate(_list(data.get("criteria")))],
        "seconds": _number(data.get("seconds")),
        "rewards": data.get("rewards") if isinstance(data.get("rewards"), list) else None,
        "exceptions": [_exception(e) for e in _list(data.get("exceptions"))],
        "attempts": _int(data.get("attempts"), 1),
        "retries": _int(data.get("retries"), 0),
    }
    # Extra fields the caller added are kept, never silently dropped.
    for key, value in data.items():
        out.setdefault(key, value)
    return out, problems


def normalize_cleanup(record: Any) -> dict[str, Any]:
    """A cleanup record with every field present and a derived ``status``."""
    data = (
        bound(dict(record)) if isinstance(record, Mapping) else {"error": f"invalid record: {bound(record)}"}
    )
    out = {
        "sandbox_id": data.get("sandbox_id"),
        "role": data.get("role"),
        "created_at": data.get("created_at"),
        "confirmed_absent_at": data.get("confirmed_absent_at"),
        "error": data.get("error"),
    }
    for key, value in data.items():
        out.setdefault(key, value)
    if out["error"]:
        # Still say whether it is gone: a leak the catalog killed differs from one still running.
        out["status"] = "error_confirmed_absent" if out["confirmed_absent_at"] else "error"
    elif out["confirmed_absent_at"]:
        out["status"] = "confirmed_absent"
    else:
        out["status"] = "unconfirmed"
    return out


_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def file_stem(case_id: str, taken: set[str]) -> str:
    """A file-system-safe, unique name for a case's files (ids are kebab-case; others are mangled)."""
    stem = _UNSAFE.sub("_", case_id)[:100].strip(".") or "_"
    candidate, n = stem, 2
    while candidate in taken:
        candidate, n = f"{stem}~{n}", n + 1
    taken.add(candidate)
    return candidate


def dumps(value: Any) -> str:
    """Compact, deterministic, ASCII-only JSON for one JSON Lines record.

    ASCII keeps every record on one line for any reader: str.splitlines() also splits on
    U+0085, U+2028 and other characters JSON would otherwise leave raw.
    """
    return json.dumps(value, sort_keys=True, ensure_ascii=True, allow_nan=False)


def pretty(value: Any) -> str:
    """Indented JSON for a whole file."""
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, allow_nan=False) + "\n"


def _text_or(value: Any, default: str) -> str:
    return value if isinstance(value, str) and value else default


def _dict(value: Any) -> dict[str, Any]:
    if isinstance(value, dict):
        return value
    return {} if value is None else {"value": value}


def _list(value: Any) -> list[Any]:
    if isinstance(value, list):
        return value
    return [] if value is None else [value]


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _int(value: Any, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _criterion(value: Any, index: int) -> dict[str, Any]:
    data = value if isinstance(value, dict) else {"description": value}
    out = {
        "id": str(data.get("id") or f"criterion-{index + 1}"),
        "description": str(data.get("description") or ""),
        "passed": bool(data.get("passed")),
        "required": bool(data.get("required", True)),
        "expected": data.get("expected"),
        "actual": data.get("actual"),
    }
    for key, item in data.items():
        out.setdefault(key, item)
    return out


def _exception(value: Any) -> dict[str, Any]:
    data = value if isinstance(value, dict) else {"type": "unknown", "message": value}
    return {"type": str(data.get("type") or "unknown"), "message": str(data.get("message") or "")}
