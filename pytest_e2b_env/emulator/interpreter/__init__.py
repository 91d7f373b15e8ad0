"""The code-interpreter template's port (49999): ``e2b_code_interpreter``'s ``run_code`` and contexts.

``service.InterpreterService`` answers the HTTP routes; ``kernel.Kernel`` drives one
``runner`` process per context inside the sandbox; ``outputs`` shapes its messages as
E2B's server streams them.
"""

from __future__ import annotations

from pytest_e2b_env.emulator.interpreter.service import InterpreterService
from pytest_e2b_env.wire.routes import JUPYTER_PORT

__all__ = ["JUPYTER_PORT", "InterpreterService"]
