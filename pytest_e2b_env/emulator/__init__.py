"""The local E2B emulator: the real e2b SDK runs offline against isolated local sandboxes.

``Emulator`` is the public entry; the server lives in ``server``/``app`` and runs in a child
process. Importing this package stays light (no e2b, no uvicorn) until a server starts.
"""

from __future__ import annotations

from pytest_e2b_env.emulator.handle import Emulator, Faults

__all__ = ["Emulator", "Faults"]
