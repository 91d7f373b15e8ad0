"""Load envd's connect-rpc stubs from the e2b wheel without running the whole SDK's import.

``import e2b.envd.process`` first executes ``e2b/__init__.py``, which imports the entire SDK
(httpx, pyqwest, every API model): about 2 s of the emulator's start-up on a busy machine.
The server needs only the generated ``*_connect``/``*_pb`` modules, which import nothing from
``e2b`` itself, so the emulator process (and only it) registers a bare ``e2b`` package first.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types

STUB_MODULES = (
    "e2b.envd.process.process_pb",
    "e2b.envd.process.process_connect",
    "e2b.envd.filesystem.filesystem_pb",
    "e2b.envd.filesystem.filesystem_connect",
)


def load() -> bool:
    """Import the stubs lightly; True if the bare package was used, False if the full SDK was."""
    if "e2b" in sys.modules:
        return False
    spec = importlib.util.find_spec("e2b")
    if spec is None or not spec.submodule_search_locations:
        return False
    package = types.ModuleType("e2b")
    package.__path__ = list(spec.submodule_search_locations)
    package.__spec__ = spec
    sys.modules["e2b"] = package
    try:
        for name in STUB_MODULES:
            importlib.import_module(name)
    except ImportError:
        # a future wheel whose stubs reach into the SDK: fall back to the ordinary import
        for name in [m for m in sys.modules if m == "e2b" or m.startswith("e2b.")]:
            del sys.modules[name]
        importlib.import_module("e2b")
        return False
    return True
