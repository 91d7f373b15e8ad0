"""What a case host's subject prints, kept for the case it printed in instead of the terminal.

A host's stdout and stderr are one pipe the controller reads. Left on the terminal, a subject's
traceback (``logging.exception``, an unretrieved task's error, a warning) landed at the top of
the run with no case named, interleaved across lanes. Here it is kept, bounded, until the case
ends; the case's record and pytest's report then carry it under the case's name.
"""

from __future__ import annotations

import contextlib
import os
import select
import threading

#: What a case keeps of its subject's output: the last bytes (a traceback ends there).
KEEP_BYTES = 32 * 1024


class OutputTail:
    """The read end of one host's output pipe: a thread drains it into a bounded tail."""

    def __init__(self) -> None:
        self._read, self.write_end = os.pipe2(os.O_CLOEXEC)
        os.set_blocking(self._read, False)
        self._lock = threading.Lock()
        self._tail = bytearray()
        self._dropped = 0
        self._closed = False
        threading.Thread(target=self._drain, name="e2b-case-host-output", daemon=True).start()

    def child_end(self) -> int:
        """The write end, for the host (the caller closes it once the host has its copy)."""
        return self.write_end

    def close_child_end(self) -> None:
        """Drop this process's copy of the write end: the pipe ends when the host's copies do."""
        if self.write_end >= 0:
            os.close(self.write_end)
            self.write_end = -1

    def _pull(self) -> bool:
        """Read what is there now (the lock is held); False at the pipe's end."""
        while True:
            try:
                chunk = os.read(self._read, 65536)
            except BlockingIOError:
                return True
            except OSError:
                return False
            if not chunk:
                return False
            self._tail += chunk
            if len(self._tail) > KEEP_BYTES:
                cut = len(self._tail) - KEEP_BYTES
                self._dropped += cut
                del self._tail[:cut]

    def _drain(self) -> None:
        poller = select.poll()
        poller.register(self._read, select.POLLIN | select.POLLHUP)
        open_ = True
        while open_:
            poller.poll(500)
            with self._lock:
                if self._closed:
                    return
                open_ = self._pull()
        with self._lock:
            self._close()

    def take(self) -> str:
        """What was printed since the last take (the tail of it, with what was dropped said)."""
        with self._lock:
            if not self._closed:
                self._pull()  # what the host wrote before its last answer is in the pipe now
            text = self._tail.decode("utf-8", "replace")
            if self._dropped:
                text = f"[{self._dropped} earlier bytes not kept]\n{text}"
            self._tail.clear()
            self._dropped = 0
            return text

    def _close(self) -> None:
        if not self._closed:
            self._closed = True
            with contextlib.suppress(OSError):
                os.close(self._read)

    def close(self) -> None:
        """Stop reading (what is left unread is dropped with the pipe)."""
        self.close_child_end()
        with self._lock:
            self._close()
