"""main_ppo's stdout and stderr, passed through the launcher as they come, read on the way.

Each pipe has a thread that copies whatever main_ppo writes to the launcher's own stream at once (bytes as they
are: tqdm's carriage returns, colours, partial lines), keeps the last TAIL_LINES lines for a stall report and hands
each complete line (ended by a newline or a carriage return) to `on_line`. A console that went away (a closed
pipe) does not stop the reading: main_ppo must never block on a full pipe.
"""

from __future__ import annotations

import collections
import os
import re
import sys
import threading
import time
from collections.abc import Callable

TAIL_LINES = 400
_READ_BYTES = 1 << 16
_LINE_END = re.compile(rb"[\r\n]")


class OutputPump:
    def __init__(self, on_line: Callable[[str], None], tail_lines: int = TAIL_LINES) -> None:
        self.on_line = on_line
        self._tail: collections.deque[str] = collections.deque(maxlen=tail_lines)
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self.lines = 0
        self.cpu_s = 0.0  # the reading threads' own CPU time, once they end

    def start(self, stdout, stderr) -> None:
        """Read the child's two pipes (file objects from Popen(stdout=PIPE, stderr=PIPE))."""
        for pipe, sink in ((stdout, sys.stdout), (stderr, sys.stderr)):
            thread = threading.Thread(target=self._copy, args=(pipe, sink), name="main_ppo-output", daemon=True)
            thread.start()
            self._threads.append(thread)

    def join(self, timeout_s: float) -> None:
        """Until both pipes are read to their end (a process main_ppo left behind may hold one open: not longer)."""
        deadline = time.monotonic() + timeout_s
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))

    def tail(self) -> list[str]:
        with self._lock:
            return list(self._tail)

    def _copy(self, pipe, sink) -> None:
        fd, out, pending = pipe.fileno(), getattr(sink, "buffer", None), b""
        try:
            while chunk := os.read(fd, _READ_BYTES):
                out = _write(out, chunk)
                *lines, pending = _LINE_END.split(pending + chunk)
                for raw in lines:
                    if raw.strip():
                        self._line(raw.decode(errors="replace"))
            if pending.strip():
                self._line(pending.decode(errors="replace"))
        except OSError:
            pass
        finally:
            with self._lock:
                self.cpu_s += time.thread_time()
            pipe.close()

    def _line(self, line: str) -> None:
        with self._lock:
            self._tail.append(line)
            self.lines += 1
        try:
            self.on_line(line)
        except Exception as err:  # reading must go on whatever a listener does
            print(f"[stall] progress reader: {type(err).__name__}: {err}", file=sys.stderr, flush=True)


def _write(out, chunk: bytes):
    """Write to the launcher's stream; None from the first failure on (the console is gone: keep reading)."""
    if out is None:
        return None
    try:
        out.write(chunk)
        out.flush()
        return out
    except (OSError, ValueError):
        return None
