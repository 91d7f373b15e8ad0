"""Temporary environment variables, restored exactly: how SDK settings reach code under test.

The e2b SDK and user subjects read ``E2B_*`` from ``os.environ``; setting them only for the
duration of a call keeps them out of the user's own environment.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping


def snapshot() -> dict[str, str]:
    """A copy of ``os.environ`` that another thread changing it cannot break.

    Copying reads the keys, then each value: a key another thread removes in between (pytest drops
    ``PYTEST_CURRENT_TEST`` after every test phase, while the lanes' threads run cases) raises
    ``KeyError`` mid-copy, and one added raises ``RuntimeError``. Such a copy is simply taken again.
    """
    for _ in range(9):
        try:
            return dict(os.environ)
        except (KeyError, RuntimeError):
            continue
    return dict(os.environ)  # a tenth collision in a row is not a race any more: let it raise


@contextlib.contextmanager
def scoped_environ(values: Mapping[str, str | None]) -> Iterator[None]:
    """Set (or, for None, remove) environment variables for the block, then restore every key."""
    saved = {key: os.environ.get(key) for key in values}
    try:
        for key, value in values.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        yield
    finally:
        for key, old in saved.items():
            if old is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = old
