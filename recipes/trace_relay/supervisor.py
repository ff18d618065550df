"""Keeps the relay answering on one address for the whole run: `serve` runs the relay under this supervisor.

The workers learn the relay's URL once, at start. A relay that dies for longer than weave's retry window
(~10 s at weave's defaults: 3 attempts of 3 HTTP tries, connection refused each time) costs the calls the
workers flush meanwhile, and a relay started anew on port 0 would listen where no worker looks. So this
process binds the address once and holds the listening socket for the whole run; each relay it starts
serves that very socket (passed down as a file descriptor). While no relay runs, the kernel still accepts
connections into the socket's backlog: a worker's request waits there (up to WEAVE_HTTP_TIMEOUT, 30 s, per
try) instead of being refused, and the next relay answers it. What the dead relay had acknowledged is in its
spool (fsynced before the 200) and the next relay sends it from the spool's checkpoint.

A relay that dies is started again after 1, 2, 4, ... s (at most MAX_DELAY_S); after `max_restarts` deaths in
a row, each within STABLE_AFTER_S of its start, the supervisor gives up (exit 1; the spool keeps what it has
for scripts/upload_traces.py). A relay that could not start (exit 2: no W&B credentials, spool in use) is
not retried. SIGTERM (or SIGINT, unless ignored as in a launcher's background job) stops it: no more
restarts, the listening socket closes, the relay drains, and its exit status becomes the supervisor's.
Only the standard library here: this process stays small and never imports weave.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time

logger = logging.getLogger(__name__)

NOT_STARTED_EXIT = 2  # the relay's own "could not start": a restart would fail the same way
GAVE_UP_EXIT = 1
MAX_DELAY_S = 30.0
STABLE_AFTER_S = 60.0  # a relay that ran this long resets the count of deaths in a row
BACKLOG = 4096  # connections that wait for the next relay while none runs


def supervise(relay_argv: list[str], host: str, port: int, max_restarts: int = 5,
              first_delay_s: float = 1.0) -> int:
    """Bind host:port, run `python -m recipes.trace_relay serve *relay_argv --listen-fd FD` on it, and start it
    again each time it dies, until stopped by a signal. Returns the exit status for the launcher."""
    try:
        listening = socket.create_server((host, port), backlog=BACKLOG)  # SO_REUSEADDR: rebinds after TIME_WAIT
    except OSError as err:
        print(f"error: trace relay not started: cannot listen on {host}:{port}: {err}", file=sys.stderr)
        return NOT_STARTED_EXIT
    address = "http://{}:{}".format(*listening.getsockname()[:2])
    stopping = threading.Event()
    relay: subprocess.Popen | None = None

    def stop(signum, _frame) -> None:
        stopping.set()
        listening.close()  # a late client is refused, not left waiting for a relay that will not come
        if relay is not None and relay.poll() is None:
            relay.send_signal(signal.SIGTERM)  # the relay drains and says what it sent

    for sig in (signal.SIGTERM, signal.SIGINT):
        if signal.getsignal(sig) is not signal.SIG_IGN:  # an inherited ignore stays (see __main__._serve)
            signal.signal(sig, stop)

    deaths_in_a_row = 0
    command = [sys.executable, "-m", "recipes.trace_relay", "serve", *relay_argv]
    while not stopping.is_set():
        started = time.monotonic()
        try:
            fd = listening.fileno()
            relay = subprocess.Popen([*command, "--listen-fd", str(fd)], pass_fds=(fd,))
        except (OSError, ValueError):  # the socket was closed by a stop signal in between
            break
        if stopping.is_set():  # a stop signal that came while Popen ran could not reach this relay
            relay.send_signal(signal.SIGTERM)
        status = relay.wait()
        if stopping.is_set():
            return status if status >= 0 else 128 - status
        lived = time.monotonic() - started
        if status == NOT_STARTED_EXIT:
            logger.error("trace relay supervisor: the relay could not start (exit %d, said above); not retried",
                         status)
            return status
        deaths_in_a_row = 1 if lived >= STABLE_AFTER_S else deaths_in_a_row + 1
        reason = f"was killed by {signal.Signals(-status).name}" if status < 0 else f"exited with status {status}"
        if deaths_in_a_row > max_restarts:
            logger.error("trace relay supervisor: the relay (pid %d) %s after %.0f s, %d deaths in a row: giving up; "
                         "workers cannot trace through %s now", relay.pid, reason, lived, deaths_in_a_row, address)
            return GAVE_UP_EXIT
        delay = min(first_delay_s * 2 ** (deaths_in_a_row - 1), MAX_DELAY_S)
        logger.warning("trace relay supervisor: the relay (pid %d) %s after %.0f s; restarting it on %s in %.1f s "
                       "(restart %d of at most %d in a row)", relay.pid, reason, lived, address, delay,
                       deaths_in_a_row, max_restarts)
        stopping.wait(delay)
    # stopped while waiting to restart: what the spool holds stays there for scripts/upload_traces.py
    return GAVE_UP_EXIT


def exit_with_parent() -> None:
    """A relay whose supervisor was killed (SIGKILL) gets SIGTERM, drains and exits, instead of holding the
    spool forever (Linux; elsewhere a no-op)."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    parent = os.getppid()
    pr_set_pdeathsig = 1
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)
    if os.getppid() != parent:  # the parent died before the call
        os.kill(os.getpid(), signal.SIGTERM)
