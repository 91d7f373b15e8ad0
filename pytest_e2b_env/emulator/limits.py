"""Bounds on what untrusted requests and sandbox contents may cost the emulator.

Every size, depth and wait the emulator accepts from a request body or from a sandbox's files
is capped here, so no input grows its memory, recursion or blocking without bound. The
defaults suit test suites; ``Emulator(limits={...})`` passes other values to the server child
as its ``--limits`` option (a JSON object of field names).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any

#: Fields with bounds beyond "positive": (lowest, highest, why).
_RANGES = {
    # a stream message of the kernel holds up to 32 Ki characters, escaped up to 12 bytes each;
    # the kernel frames a message with 8 hex digits of length
    "interpreter_message_bytes": (1 << 20, 1 << 30, "a kernel message must hold 32 KiB of text"),
}


@dataclass(frozen=True)
class Limits:
    """The caps of one emulator (bytes, levels, entries, seconds)."""

    #: REST and control-endpoint request bodies (JSON): larger ones answer 413.
    body_bytes: int = 1 << 20
    #: Deepest JSON nesting accepted in a REST or control body (400 beyond).
    json_depth: int = 32
    #: Largest file ``files.read`` serves and ``files.write`` accepts (after decompression).
    file_bytes: int = 64 << 20
    #: Deepest ``files.list(depth=...)`` served (INVALID_ARGUMENT beyond).
    list_depth: int = 256
    #: Most entries one ``files.list`` answers (INVALID_ARGUMENT beyond).
    list_entries: int = 100_000
    #: Command output queued for one stream subscriber before the command's pipes stop being
    #: read (back-pressure: the command blocks on write, as with a real pipe).
    output_bytes: int = 4 << 20
    #: Code-interpreter output of one cell queued for its client before the kernel's pipe stops
    #: being read (back-pressure, as ``output_bytes``); a larger message passes alone.
    interpreter_output_bytes: int = 4 << 20
    #: The same for all cells of one sandbox together (its contexts share it).
    interpreter_sandbox_bytes: int = 16 << 20
    #: Largest message a kernel may send (one result with its representations, an error, a
    #: stream chunk); the kernel keeps under it, a larger one is dropped with a note on stderr.
    interpreter_message_bytes: int = 16 << 20
    #: Longest wait for a command to take stdin before ``send_stdin`` gives up (DEADLINE_EXCEEDED).
    stdin_wait_s: float = 60.0
    #: Longest wait for one files request to a sandbox's init; a silent init is torn down.
    fs_timeout_s: float = 60.0
    #: Most open connections (also capped at a quarter of the open-files limit); past it the
    #: longest-idle one is closed for each new one, a request in flight never.
    max_connections: int = 4096
    #: A connection with no request in flight closes after this long.
    idle_seconds: float = 30.0
    #: Memory of one sandbox besides its files (MiB; cgroup v1 memory where the host has it).
    sandbox_memory_mb: int = 512
    #: Size of one sandbox's writable layer (MiB; its own tmpfs, which also counts as memory).
    sandbox_disk_mb: int = 1024

    @property
    def upload_bytes(self) -> int:
        """Largest ``POST /files`` body: one file at the cap plus room for multipart framing."""
        return self.file_bytes + (1 << 20)

    def to_json(self) -> str:
        """The JSON form read back by :meth:`parse` (the child's ``--limits``)."""
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def build(cls, values: dict[str, Any] | None) -> Limits:
        """Limits with ``values`` replacing defaults; raises ValueError naming a bad field."""
        values = dict(values or {})
        known = {f.name: f for f in dataclasses.fields(cls)}
        for name, value in values.items():
            if name not in known:
                raise ValueError(f"limits: unknown field {name!r}; known fields: {', '.join(sorted(known))}")
            if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
                raise ValueError(f"limits: {name}={value!r} must be a positive number")
            if known[name].type == "int" and not isinstance(value, int):
                raise ValueError(f"limits: {name}={value!r} must be an integer")
            if name in _RANGES:
                low, high, why = _RANGES[name]
                if not low <= value <= high:
                    raise ValueError(f"limits: {name}={value!r} must be between {low} and {high} ({why})")
        return cls(**values)

    @classmethod
    def parse(cls, raw: str) -> Limits:
        """The limits a ``--limits`` JSON object names (empty: the defaults); ValueError names the fault."""
        if not raw:
            return cls()
        try:
            values = json.loads(raw)
        except ValueError:
            raise ValueError(f"--limits is not a JSON object: {raw[:200]!r}") from None
        if not isinstance(values, dict):
            raise ValueError(f"--limits is not a JSON object: {raw[:200]!r}")
        return cls.build(values)
