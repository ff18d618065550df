"""A process's threads and children, from /proc (Linux), for tests that hand a signal to one thread on purpose:
`os.kill(tid, sig)` signals the whole process but gives the signal to that thread first."""

from __future__ import annotations

import os
from pathlib import Path


def other_threads(pid: int) -> list[int]:
    """The ids of the process's threads other than its main thread."""
    return [int(tid) for tid in os.listdir(f"/proc/{pid}/task") if int(tid) != pid]


def children(pid: int) -> list[int]:
    """The process's children, whichever of its threads started them."""
    return [int(child) for tid in os.listdir(f"/proc/{pid}/task")
            for child in Path(f"/proc/{pid}/task/{tid}/children").read_text().split()]
