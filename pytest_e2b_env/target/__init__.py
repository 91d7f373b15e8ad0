"""Where sandboxes come from: the local emulator (offline) or the fault proxy before real E2B (live).

Everything that opens, tags, sweeps or faults a target goes through this package.
"""

from __future__ import annotations

from pytest_e2b_env.target.handle import (
    MODE_ENV,
    RUN_ENV,
    SDK_KEYS,
    Target,
    new_run_id,
    open_target,
    stale_run_lines,
)

__all__ = ["MODE_ENV", "RUN_ENV", "SDK_KEYS", "Target", "new_run_id", "open_target", "stale_run_lines"]
