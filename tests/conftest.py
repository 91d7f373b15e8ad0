"""Suite-wide test configuration. Area fixtures live in each tests/<area>/conftest.py."""

from __future__ import annotations

import os

# The tiny model and tokenizer are built locally; nothing may reach a hub, ever.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
