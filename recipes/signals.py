"""Waiting in the main thread for what a signal handler does.

Python runs a signal handler in the main thread only, and only between bytecodes. The kernel may hand a signal sent to
the process (kill, killpg, Ctrl-C) to ANY of its threads: one that is creating a thread or a process at that moment
takes it (this is how a relay serving requests, or a launcher probing its relay, catches a SIGTERM meant for it). The
main thread is then not woken: blocked in `Event.wait()` with no timeout, it never runs the handler,
and the process never stops. So the main thread here never blocks on one without a timeout: it wakes every
WAKE_EVERY_S and a handler that is due runs then. Standard library only (the relay keeper imports this).
"""

from __future__ import annotations

import threading

WAKE_EVERY_S = 0.5


def wait_for_event(event: threading.Event, *also: threading.Event) -> None:
    """Until `event` or one of `also` is set, running any signal handler that falls due meanwhile."""
    while not (event.wait(WAKE_EVERY_S) or any(other.is_set() for other in also)):
        pass
