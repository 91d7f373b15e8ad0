"""Suite-wide test configuration. Area fixtures live in each tests/<area>/conftest.py."""

from __future__ import annotations

import os

# pytester's in-process runs drop every module first imported inside them. If httpcore is first
# imported there, a later copy of it no longer matches the exception map httpx built from the first
# one, and raw httpcore errors escape `except httpx.HTTPError` in the fault proxy. Importing the
# transport stack here keeps one copy for the whole session, whatever order tests run in.
import httpcore  # noqa: F401
import httpx  # noqa: F401
import pytest

# The tiny model and tokenizer are built locally; nothing may reach a hub, ever.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")


@pytest.fixture(autouse=True)
def _no_job_summary(monkeypatch: pytest.MonkeyPatch) -> None:
    """Runs inside tests never append to the CI job's summary (the outer run's catalog summary still does)."""
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
