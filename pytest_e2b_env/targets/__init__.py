"""Where sandboxes come from: the local emulator (offline) or the fault proxy before real E2B (live).

Everything that opens, tags, sweeps or reaps a target's sandboxes goes through this package:
``open_target`` and ``Target`` (``handle``), the ``Backend`` protocol both backends implement
(``backend``), tags, listing and kill-and-confirm (``tags``) and stale runs (``reap``). Every
environment variable the project reads is declared in :mod:`pytest_e2b_env.settings`.
"""

from __future__ import annotations

from pytest_e2b_env.targets.handle import Target, open_target

__all__ = ["Target", "open_target"]
