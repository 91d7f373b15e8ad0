"""Training: TRL GRPO on exactly the reward pool and episode code the catalog validates.

Entry point: :func:`pytest_e2b_env.cli.train.main` (``train.py``, ``pytest-e2b-env train``).
Nothing here imports torch, transformers or trl at module import time.
"""

from __future__ import annotations
