"""How long each catalog case took last time, kept in pytest's cache, so lanes start the longest first.

Lanes take their cases in this order; items still report in collection order, so verdicts,
records and the bundle do not change, only which case a lane starts next. A case that runs to a
deadline or paces its creates (seconds of waiting) started last leaves the other lanes idle at
the end of the run; started first, its waiting overlaps everyone else's work.

The cache is pytest's own (``.pytest_cache``): ``-p no:cacheprovider``, a fresh checkout (every CI
run) or ``--cache-clear`` leaves it empty. Then a case directory's ``seconds.json`` (case id to
seconds, as :func:`reference` reads it) gives the order: the bundled catalog carries one, measured
on the reference subjects (``scripts/case_seconds.py``), so a first run starts its deadline cases
first too. Cases neither knows go first of all. A malformed file or entry is ignored, never an
error: these times choose an order, never a verdict.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import pytest

if TYPE_CHECKING:
    from pytest_e2b_env.catalog.model import Case

T = TypeVar("T")

#: The cache key (pytest keeps it under .pytest_cache/v/).
KEY = "pytest_e2b_env/case_seconds"
#: At most this many cases are remembered (the newest run's first): a bound on the file.
MAX_ENTRIES = 4096
#: The reference times a case directory may carry, beside its case files.
REFERENCE_FILE = "seconds.json"
#: A larger reference file is not read (4096 entries fit in a fraction of it).
MAX_REFERENCE_BYTES = 1 << 20


def _cache(config: pytest.Config) -> Any:
    return getattr(config, "cache", None)  # None under -p no:cacheprovider


def _valid(raw: object) -> dict[str, float]:
    """The well-formed entries of a mapping of names to seconds (at most ``MAX_ENTRIES``)."""
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


def load(config: pytest.Config) -> dict[str, float]:
    """Seconds per node id from earlier runs (empty without a cache or with a malformed one)."""
    cache = _cache(config)
    return {} if cache is None else _valid(cache.get(KEY, {}))


def reference(cases: Iterable[Case]) -> dict[str, float]:
    """Seconds per case id from the ``seconds.json`` beside the cases' files, where there is one.

    The file is ``{"seconds": {case id: seconds}}``; only ids of ``cases`` from that directory
    count, so a file cannot reorder another directory's cases.
    """
    by_dir: dict[Path, set[str]] = {}
    for case in cases:
        if case.source_file:
            by_dir.setdefault(Path(case.source_file).parent, set()).add(case.id)
    found: dict[str, float] = {}
    for directory, ids in by_dir.items():
        path = directory / REFERENCE_FILE
        try:
            if path.stat().st_size > MAX_REFERENCE_BYTES:
                continue
            raw = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue  # no file, unreadable or not JSON: catalog order for these cases
        seconds = _valid(raw.get("seconds") if isinstance(raw, dict) else None)
        found.update((key, value) for key, value in seconds.items() if key in ids)
    return found


def estimates(config: pytest.Config, cases: Iterable[tuple[str, Case]]) -> dict[str, float]:
    """Seconds per node id of ``cases`` ((node id, case)): this project's last run where it has
    one, else the case directory's reference time; a case known to neither has no entry."""
    pairs = list(cases)
    last = load(config)
    known = reference(case for _, case in pairs)
    out: dict[str, float] = {}
    for nodeid, case in pairs:
        seconds = last.get(nodeid, known.get(case.id))
        if seconds is not None:
            out[nodeid] = seconds
    return out


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
