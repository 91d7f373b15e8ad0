"""What the emulator and the fault proxy share on the wire: fault rules, the ledger, route names.

Both backends import this; neither imports the other.
"""

#: The control API (``control.ControlEndpoint``): its path prefix and the header carrying its key.
#: Here, not in ``control``, so the emulator's handle reaches it without importing pydantic.
CONTROL_PREFIX = "/_emulator"
CONTROL_HEADER = "x-emulator-key"
