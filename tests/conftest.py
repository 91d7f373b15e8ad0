"""Suite-wide test configuration. Area fixtures live in each tests/<area>/conftest.py."""

from __future__ import annotations

import os

# pytester's in-process runs drop every module first imported inside them. If httpcore is first
# imported there, a later copy of it no longer matches the exception map httpx built from the first
# one, and raw httpcore errors escape `except httpx.HTTPError` in the fault proxy. Importing the
# transport stack here keeps one copy for the whole session, whatever order tests run in.
import httpcore  # noqa: F401
import httpx  # noqa: F401

# The tiny model and tokenizer are built locally; nothing may reach a hub, ever.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
# GitHub Actions sets this for the job; the suite's own pytest runs must not append to its summary
# (the tests that exercise it set it to a temp file themselves).
os.environ.pop("GITHUB_STEP_SUMMARY", None)
