"""How long each catalog case took last time, kept in pytest's cache, so lanes start the longest first.

Lanes take their cases in this order; items still report in collection order, so verdicts,
records and the bundle do not change, only which case a lane starts next. A case that runs to a
deadline or paces its creates (seconds of waiting) started last leaves the other lanes idle at
the end of the run; started first, its waiting overlaps everyone else's work.

The cache is pytest's own (``.pytest_cache``): ``-p no:cacheprovider`` or a fresh checkout means
catalog order, ``--cache-clear`` forgets. Entries are node ids and seconds; a malformed file is
ignored, never an error.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

import pytest

T = TypeVar("T")

#: The cache key (pytest keeps it under .pytest_cache/v/).
KEY = "pytest_e2b_env/case_seconds"
#: At most this many cases are remembered (the newest run's first): a bound on the file.
MAX_ENTRIES = 4096


def _cache(config: pytest.Config) -> Any:
    return getattr(config, "cache", None)  # None under -p no:cacheprovider


def load(config: pytest.Config) -> dict[str, float]:
    """Seconds per node id from earlier runs (empty without a cache or with a malformed one)."""
    cache = _cache(config)
    if cache is None:
        return {}
    raw = cache.get(KEY, {})
    if not isinstance(raw, dict):
        return {}
    return {
        key: float(value)
        for key, value in list(raw.items())[:MAX_ENTRIES]
        if isinstance(key, str)
        and isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value >= 0
    }


def save(config: pytest.Config, measured: Iterable[tuple[str, float]]) -> None:
    """Remember this run's case times, over what earlier runs left (bounded by ``MAX_ENTRIES``)."""
    cache = _cache(config)
    fresh = {key: round(seconds, 3) for key, seconds in measured}
    if cache is None or not fresh:
        return
    kept = {key: value for key, value in load(config).items() if key not in fresh}
    merged = {**fresh, **kept}
    cache.set(KEY, dict(list(merged.items())[:MAX_ENTRIES]))


def longest_first(items: Iterable[T], seconds: dict[str, float], key: Callable[[T], str]) -> list[T]:
    """``items`` by the last time of ``key(item)``, longest first; never-seen ones first of all,
    in their own order. An unknown case may be long: started early it can only help the end."""
    return sorted(items, key=lambda item: -seconds.get(key(item), math.inf))
