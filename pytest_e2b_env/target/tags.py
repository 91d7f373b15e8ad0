"""The metadata every sandbox of this tool carries, and the one sweep by it."""

from __future__ import annotations

#: Metadata key holding the run id; ``reap`` and every sweep look for it.
RUN_KEY = "pytest_e2b_env_run"
#: Metadata key saying what a sandbox is for (``reward-worker``, ``policy``, ``verifier``, ``test``...).
ROLE_KEY = "role"
