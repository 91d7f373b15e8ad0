"""Where sandboxes come from: the local emulator (offline) or the fault proxy before real E2B (live).

Everything that opens, tags, sweeps or faults a target goes through this package; every
environment variable the project reads or writes is declared in :mod:`.settings`.
"""

from __future__ import annotations

from pytest_e2b_env.target.handle import Target, open_target, stale_run_lines
from pytest_e2b_env.target.settings import ENVIRONMENT, TargetSettings, new_run_id

__all__ = ["ENVIRONMENT", "Target", "TargetSettings", "new_run_id", "open_target", "stale_run_lines"]
