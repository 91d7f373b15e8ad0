"""Temporary environment variables, restored exactly: how SDK settings reach code under test.

The e2b SDK and user subjects read ``E2B_*`` from ``os.environ``; setting them only for the
duration of a call keeps them out of the user's own environment.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping


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
