"""A value's MIME bundle as E2B's IPython kernel formats it (the kernel's display side).

IPython calls every formatter on a displayed value. The ``_repr_*_`` protocol gives the rich
formats; E2B's template adds its own formatters (``startup_scripts/0002_data.py``): a ``list`` or
``dict`` gets ``application/json`` (through ``orjson`` with ``OPT_NON_STR_KEYS`` and
``OPT_SERIALIZE_NUMPY``; anything orjson refuses falls back to ``_repr_json_``), and a pandas
``DataFrame`` gets ``e2b/data`` (``to_dict(orient="list")``, timestamps in ISO form).
``text/plain`` is always there: the ``repr``, containers pretty-printed at 79 columns with strings
never split (E2B sets ``max_seq_length = 0``, so nothing is shortened). Sizes are bounded.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime
import enum
import json
import math
import os
import pprint
import sys
import uuid
from typing import Any, ClassVar

MESSAGE_LIMIT = 16 * 1024 * 1024  # one kernel message (the emulator's limits op sets it)
MIME_LIMIT = 4 * 1024 * 1024  # one representation larger than this is dropped (noted on stderr)
BUNDLE_LIMIT = 8 * 1024 * 1024  # all representations of one value
REPR_LIMIT = 1024 * 1024  # text/plain is cut here
JSON_DEPTH = 254  # orjson's recursion limit

REPR_METHODS = (
    ("text/html", "_repr_html_"),
    ("text/markdown", "_repr_markdown_"),
    ("image/svg+xml", "_repr_svg_"),
    ("image/png", "_repr_png_"),
    ("image/jpeg", "_repr_jpeg_"),
    ("application/pdf", "_repr_pdf_"),
    ("text/latex", "_repr_latex_"),
    ("application/json", "_repr_json_"),
    ("application/javascript", "_repr_javascript_"),
)


def set_limits(message_bytes: Any) -> None:
    """Take the emulator's message cap: a value's representations keep to 7/8 of it (text/plain
    and the message's own fields need the rest), one representation to 4 MiB at most."""
    global MESSAGE_LIMIT, MIME_LIMIT, BUNDLE_LIMIT
    if isinstance(message_bytes, int) and not isinstance(message_bytes, bool) and message_bytes >= 1 << 16:
        MESSAGE_LIMIT = message_bytes
        BUNDLE_LIMIT = min(8 * 1024 * 1024, message_bytes - message_bytes // 8)
        MIME_LIMIT = min(4 * 1024 * 1024, BUNDLE_LIMIT)


def safe_str(obj: Any, limit: int = REPR_LIMIT) -> str:
    try:
        return str(obj)[:limit]
    except Exception:
        return f"<unprintable {type(obj).__name__} object>"


class _Printer(pprint.PrettyPrinter):
    """pprint as IPython's pretty printer lays builtins out: long strings and bytes stay whole."""

    _dispatch: ClassVar[dict[Any, Any]] = {
        key: value
        for key, value in pprint.PrettyPrinter._dispatch.items()  # type: ignore[attr-defined]
        if key not in (str.__repr__, bytes.__repr__, bytearray.__repr__)
    }


def plain(value: Any) -> str:
    """text/plain as IPython's pretty printer gives it for builtin values (wrapped at 79 columns)."""
    try:
        if isinstance(value, (dict, list, tuple, set, frozenset)):
            text = _Printer(width=79, sort_dicts=False).pformat(value)
        else:
            text = repr(value)
    except Exception as exc:
        text = f"<repr of {type(value).__name__} failed: {type(exc).__name__}>"
    return text[:REPR_LIMIT]


def mime_bundle(value: Any) -> dict[str, Any]:
    """The representations of ``value``, as E2B's kernel formats it, text/plain always."""
    data: dict[str, Any] = {}
    bundle = _call_repr(value, "_repr_mimebundle_", include=None, exclude=None)
    if isinstance(bundle, tuple):
        bundle = bundle[0]
    if isinstance(bundle, dict):
        data.update({str(k): v for k, v in bundle.items()})
    if "application/json" not in data and isinstance(value, (list, dict)):
        found = e2b_json(value)
        if found is not _REFUSED:
            data["application/json"] = found
    if "e2b/data" not in data:
        frame = e2b_data(value)
        if frame is not None:
            data["e2b/data"] = frame
    for mime, method in REPR_METHODS:
        if mime in data:
            continue
        rendered = _call_repr(value, method)
        if isinstance(rendered, tuple):  # (data, metadata)
            rendered = rendered[0]
        if rendered is not None:
            data[mime] = rendered
    return bounded(data, value)


def bounded(data: dict[str, Any], value: Any = None) -> dict[str, Any]:
    """``data`` with representations over the limits dropped (noted on stderr) and text/plain added."""
    total = 0
    for mime, rendered in list(data.items()):
        if isinstance(rendered, (bytes, bytearray)):
            rendered = base64.b64encode(bytes(rendered)).decode("ascii")
        try:
            size = len(json.dumps(rendered))
        except (TypeError, ValueError, RecursionError):
            rendered = safe_str(rendered)
            size = len(json.dumps(rendered))
        if size > MIME_LIMIT or total + size > BUNDLE_LIMIT:
            del data[mime]
            os.write(2, f"display: {mime} representation dropped ({size} bytes, over the limit)\n".encode())
            continue
        total += size
        data[mime] = rendered
    if "text/plain" not in data:
        data["text/plain"] = plain(value)
    return data


def _call_repr(value: Any, method: str, **kwargs: Any) -> Any:
    if isinstance(value, type):  # classes have the methods unbound; IPython skips them too
        return None
    try:
        func = getattr(value, method, None)
        if not callable(func):
            return None
        return func(**kwargs)
    except Exception:  # a broken _repr_*_ only loses that representation, as in IPython
        return None


# ------------------------------------------------------------------ E2B's formatters
class _Refused:
    """orjson would raise (E2B's formatter then falls back to ``_repr_json_``)."""


_REFUSED: Any = _Refused()


def e2b_json(value: Any) -> Any:
    """``orjson.loads(orjson.dumps(value, OPT_NON_STR_KEYS | OPT_SERIALIZE_NUMPY))``, or _REFUSED."""
    try:
        return _to_json(value, 0)
    except (TypeError, ValueError, RecursionError):
        return _REFUSED


def _to_json(value: Any, depth: int) -> Any:
    if depth > JSON_DEPTH:
        raise TypeError("Recursion limit reached")
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, enum.Enum):
        return _to_json(value.value, depth + 1)
    if isinstance(value, int):
        if not -(2**63) <= value < 2**64:
            raise TypeError("Integer exceeds 64-bit range")
        return int(value)
    if isinstance(value, float):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, str):
        value.encode("utf-8")  # surrogates: UnicodeEncodeError, a ValueError
        return str(value)
    if isinstance(value, dict):
        return {_json_key(k): _to_json(v, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_to_json(v, depth + 1) for v in value]
    if isinstance(value, (datetime.datetime, datetime.date, datetime.time)):
        if isinstance(value, datetime.time) and value.tzinfo is not None:
            raise TypeError("datetime.time must not have tzinfo set")
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    if dataclasses.is_dataclass(value):
        return {f.name: _to_json(getattr(value, f.name), depth + 1) for f in dataclasses.fields(value)}
    if type(value).__module__ == "numpy" and hasattr(value, "tolist"):
        return _to_json(value.tolist(), depth + 1)
    raise TypeError(f"Type is not JSON serializable: {type(value).__name__}")


def _json_key(key: Any) -> str:
    if isinstance(key, str):
        key.encode("utf-8")
        return key
    if isinstance(key, enum.Enum):
        return _json_key(key.value)
    if key is None or isinstance(key, (bool, int, float)):
        return json.dumps(_to_json(key, 0))
    if isinstance(key, (datetime.datetime, datetime.date, datetime.time, uuid.UUID)):
        return str(_to_json(key, 0))
    raise TypeError("Dict key must a type serializable with OPT_NON_STR_KEYS")


def e2b_data(value: Any) -> Any:
    """A pandas DataFrame's columns (E2B's ``e2b/data``), else None (pandas never imported here)."""
    pandas = sys.modules.get("pandas")
    if pandas is None or not isinstance(value, pandas.DataFrame):
        return None
    try:
        columns = value.to_dict(orient="list")
        return {
            str(k): [v.isoformat() if isinstance(v, pandas.Timestamp) else v for v in vs]
            for k, vs in columns.items()
        }
    except Exception:
        return None
