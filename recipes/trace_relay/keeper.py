"""Keeps one node's trace relay answering on one address for a whole run: a relay that dies, or stops answering,
is replaced on the same address without losing what it acknowledged.

The workers learn the relay's URL once, at start. So the keeper binds the address once and holds the listening
socket for the whole run; each relay it starts (`python -m recipes.trace_relay serve --listen-fd FD`, a process of
its own, whose command line names `trace_relay`) serves that very socket. While no relay runs, the kernel still
accepts connections into the socket's backlog: a worker's request waits there (up to WEAVE_HTTP_TIMEOUT, 30 s, per
try) instead of being refused, and the next relay answers it. What a relay acknowledged is in its spool (fsynced
before the 200); the next relay sends it from the spool's checkpoint and keeps a repeat of it once (repeats.py).

Two ways a relay fails, both seen by this keeper:
- it dies (crash, OOM kill, SIGKILL): started again after 1, 2, 4, ... s (at most MAX_DELAY_S);
- it stops answering (SIGSTOP, a deadlock, a disk that blocks): the keeper asks it `GET /trace_relay/health` every
  PROBE_EVERY_S; one that answers none for `hang_after_s` (HANG_AFTER_S, 15 s; a new relay gets STARTUP_GRACE_S to
  answer its first) is killed with SIGKILL, which also ends a stopped process, and replaced at once. A request it
  had taken is cut off; the worker's client sends it again, to the next relay.
After `max_restarts` replacements in a row, each within STABLE_AFTER_S of its start, the keeper gives up (the spool
keeps what it has for gsm8k-upload-traces). A relay that could not start (exit 2: no W&B credentials) is not
retried. `stop()` ends it: no more replacements, the listening socket closes, the relay drains (SIGTERM) and its exit
status is the keeper's.

Used in three places: `python -m recipes.trace_relay serve` (supervise(), below), the launcher for the node it runs
on (recipes/launch/relays.py), and one Ray actor per node of a cluster (recipes/trace_relay/on_ray.py). Only the
standard library here (and recipes/private_files.py): a keeper never imports weave.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

from recipes.private_files import Folder
from recipes.signals import wait_for_event
from recipes.trace_relay.names import RELAY_HEALTH_PATH, TRACE_RELAY_TOKEN_ENV

logger = logging.getLogger(__name__)

NOT_STARTED_EXIT = 2  # the relay's own "could not start": a restart would fail the same way
GAVE_UP_EXIT = 1
MAX_DELAY_S = 30.0
STABLE_AFTER_S = 60.0  # a relay that ran this long resets the count of replacements in a row
BACKLOG = 4096  # connections that wait for the next relay while none runs
HANG_AFTER_S = 15.0  # no answer to a health probe for this long: the relay is replaced
PROBE_EVERY_S = 1.0
STARTUP_GRACE_S = 120.0  # a relay imports weave before it answers; on a busy node that takes a while
RELAY_MODULE = "recipes.trace_relay"
_RECIPES_ROOT = str(Path(__file__).resolve().parents[2])  # so the relay imports this recipe from any cwd


class RelayKeeper:
    """Holds host:port and keeps `python -m recipes.trace_relay serve *relay_argv --listen-fd FD` serving it. `log`:
    the relays' output, opened once at start (never through a link, a file of this user's) and handed to each relay;
    `env`: added to each relay's environment, where the run's token travels (the keeper's health probe presents it)."""

    def __init__(self, relay_argv: list[str], host: str = "127.0.0.1", port: int = 0, *, log: Path | None = None,
                 max_restarts: int = 5, first_delay_s: float = 1.0, hang_after_s: float = HANG_AFTER_S,
                 probe_every_s: float = PROBE_EVERY_S, startup_grace_s: float = STARTUP_GRACE_S,
                 env: dict[str, str] | None = None) -> None:
        self.relay_argv = list(relay_argv)
        self.env = dict(env or {})  # added to each relay's environment: the run's token, never on a command line
        self.token = self.env.get(TRACE_RELAY_TOKEN_ENV) or os.environ.get(TRACE_RELAY_TOKEN_ENV, "")
        self.host, self.port = host, port
        self.log = Path(log) if log else None
        self._log_fd: int | None = None
        self.max_restarts, self.first_delay_s = max_restarts, first_delay_s
        self.hang_after_s, self.probe_every_s, self.startup_grace_s = hang_after_s, probe_every_s, startup_grace_s
        self.replaced = 0  # relays started again after one died or stopped answering
        self.hangs = 0  # of those, the ones that stopped answering
        self.status: int | None = None  # the keeper's exit status once it has ended
        self.ended = threading.Event()
        self.ready = threading.Event()  # a relay answered (or the keeper ended)
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._relay: subprocess.Popen | None = None
        self._listening: socket.socket | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def relay_pid(self) -> int | None:
        relay = self._relay
        return relay.pid if relay is not None and relay.poll() is None else None

    def start(self) -> RelayKeeper:
        """Open the log, bind the address (OSError if it cannot: Untrusted for a log that is a link or another
        user's file) and start the first relay in the background."""
        if self.log is not None and self._log_fd is None:
            with Folder.open(self.log.parent, create=True) as folder:
                self._log_fd = folder.open_file(self.log.name, os.O_RDWR | os.O_APPEND)
        self._listening = socket.create_server((self.host, self.port), backlog=BACKLOG)  # SO_REUSEADDR
        self.port = self._listening.getsockname()[1]
        # the relays start from this thread: Linux sends a relay its parent-death signal when this thread ends
        self._thread = threading.Thread(target=self._keep, name=f"relay-keeper-{self.port}", daemon=True)
        self._thread.start()
        return self

    def wait_ready(self, timeout_s: float) -> bool:
        """True once a relay answered; False if none did in time or the keeper gave up."""
        self.ready.wait(timeout_s)
        return self.ready.is_set() and not self.ended.is_set()

    def stop(self, timeout_s: float | None = None) -> int:
        """No more replacements; the relay drains and exits (SIGCONT first: a stopped one could not). Returns the
        last relay's exit status (0: nothing left in the spool, 3: records pending), or why the keeper ended."""
        self._stopping.set()
        if self._listening is not None:
            self._listening.close()  # a late client is refused, not left waiting for a relay that will not come
        with self._lock:
            relay = self._relay
            if relay is not None and relay.poll() is None:
                relay.send_signal(signal.SIGCONT)
                relay.send_signal(signal.SIGTERM)
        if self._thread is not None:
            self._thread.join(timeout_s)
        if self._log_fd is not None and self.ended.is_set():
            os.close(self._log_fd)
            self._log_fd = None
        return GAVE_UP_EXIT if self.status is None else self.status

    def log_tail(self, lines: int = 3) -> list[str]:
        """The last lines the relays wrote to the log (read from the keeper's own descriptor, until its stop)."""
        if self._log_fd is None:
            return []
        size = os.fstat(self._log_fd).st_size
        return os.pread(self._log_fd, 8192, max(0, size - 8192)).decode(errors="replace").splitlines()[-lines:]

    # --- the keeper's thread ------------------------------------------------------------------------
    def _keep(self) -> None:
        try:
            self.status = self._keep_relays()
        finally:
            self.ended.set()
            self.ready.set()

    def _keep_relays(self) -> int:
        in_a_row = 0
        while not self._stopping.is_set():
            started = time.monotonic()
            try:
                relay = self._spawn()
            except (OSError, ValueError):  # the socket was closed by stop() in between
                break
            hung = self._watch(relay, started)
            status = relay.wait()
            if self._stopping.is_set():
                return status if status >= 0 else 128 - status
            lived = time.monotonic() - started
            if status == NOT_STARTED_EXIT and not hung:
                logger.error("trace relay supervisor: the relay could not start (exit %d, said above); not retried",
                             status)
                return status
            in_a_row = 1 if lived >= STABLE_AFTER_S else in_a_row + 1
            if hung:
                reason = f"answered no health check for {self.hang_after_s:.0f} s ({hung}): killed"
            else:
                reason = (f"was killed by {signal.Signals(-status).name}" if status < 0
                          else f"exited with status {status}")
            if in_a_row > self.max_restarts:
                logger.error("trace relay supervisor: the relay (pid %d) %s after %.0f s, %d in a row: giving up; "
                             "workers cannot trace through %s now", relay.pid, reason, lived, in_a_row, self.url)
                return GAVE_UP_EXIT
            # one killed for hanging is replaced at once; one that died waits, longer each time in a row
            delay = 0.0 if hung else min(self.first_delay_s * 2 ** (in_a_row - 1), MAX_DELAY_S)
            self.replaced += 1
            self.hangs += bool(hung)
            logger.warning("trace relay supervisor: the relay (pid %d) %s after %.0f s; restarting it on %s in %.1f s "
                           "(restart %d of at most %d in a row)", relay.pid, reason, lived, self.url, delay,
                           in_a_row, self.max_restarts)
            self._stopping.wait(delay)
        return GAVE_UP_EXIT  # stopped while waiting to restart: the spool keeps what it holds

    def _spawn(self) -> subprocess.Popen:
        fd = self._listening.fileno()
        env = {**os.environ, **self.env, "PYTHONPATH": os.pathsep.join(filter(None, [_RECIPES_ROOT,
                                                                                     os.environ.get("PYTHONPATH")]))}
        out = self._log_fd  # the relay gets its own copy of the keeper's descriptor
        # its own session: a Ctrl-C meant for training never reaches it before the workers' last flush
        relay = subprocess.Popen([sys.executable, "-m", RELAY_MODULE, "serve", *self.relay_argv,
                                  "--listen-fd", str(fd)], pass_fds=(fd,), env=env, stdout=out,
                                 stderr=subprocess.STDOUT if out is not None else None, start_new_session=True)
        with self._lock:
            self._relay = relay
            if self._stopping.is_set():  # a stop that came while Popen ran could not reach this relay
                relay.send_signal(signal.SIGTERM)
        return relay

    def _watch(self, relay: subprocess.Popen, started: float) -> str | None:
        """Until the relay exits or the keeper stops: None. A relay that stops answering is killed: its state
        then (`stopped` for SIGSTOP, else `running`, `sleeping`, ...) is returned."""
        answered = None
        while relay.poll() is None and not self._stopping.is_set():
            # short probes while it starts (one that exits at once is seen at once), longer once it answered
            if self._answers(timeout_s=min(2.0, max(self.hang_after_s / 3, 0.5)) if answered else 0.5):
                answered = time.monotonic()
                self.ready.set()
            elif time.monotonic() - (answered or started) > (self.hang_after_s if answered else self.startup_grace_s):
                state = process_state(relay.pid)
                if relay.poll() is None and not self._stopping.is_set():
                    relay.kill()  # SIGKILL ends a stopped process too; its socket copy and spool lock go with it
                    return state
            self._stopping.wait(self.probe_every_s)
        return None

    def _answers(self, timeout_s: float) -> bool:
        return relay_answers(self.url, self.token, timeout_s)


def relay_answers(url: str, token: str, timeout_s: float) -> bool:
    """Whether the relay at `url` answers its health route to a client presenting the run's `token`."""
    probe = urllib.request.Request(url + RELAY_HEALTH_PATH, headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(probe, timeout=timeout_s) as answer:
            return json.load(answer).get("trace_relay") is True
    except (OSError, ValueError, AttributeError):
        return False


def process_state(pid: int) -> str:
    """`stopped`, `running`, `sleeping`, `disk sleep`, ... from /proc (Linux), or `unknown`."""
    names = {"R": "running", "S": "sleeping", "D": "disk sleep", "T": "stopped", "t": "stopped (traced)",
             "Z": "zombie"}
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return "unknown"
    return names.get(stat.rsplit(")", 1)[1].split()[0], "unknown")


def supervise(relay_argv: list[str], host: str, port: int, max_restarts: int = 5, first_delay_s: float = 1.0,
              hang_after_s: float = HANG_AFTER_S) -> int:
    """`python -m recipes.trace_relay serve` without --listen-fd: keep a relay on host:port until SIGTERM (or SIGINT,
    unless ignored as in a launcher's background job). Returns the exit status."""
    try:
        keeper = RelayKeeper(relay_argv, host, port, max_restarts=max_restarts, first_delay_s=first_delay_s,
                             hang_after_s=hang_after_s).start()
    except OSError as err:
        print(f"error: trace relay not started: cannot listen on {host}:{port}: {err}", file=sys.stderr)
        return NOT_STARTED_EXIT
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        if signal.getsignal(sig) is not signal.SIG_IGN:  # an inherited ignore stays (see __main__._serve)
            signal.signal(sig, lambda *_: stop.set())
    wait_for_event(stop, keeper.ended)
    return keeper.stop()


def exit_with_parent() -> None:
    """A relay whose keeper was killed gets SIGHUP and exits at once (its spool keeps what it acknowledged), instead
    of holding the spool and the address from the next keeper (Linux; elsewhere a no-op)."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    parent = os.getppid()
    pr_set_pdeathsig = 1
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGHUP)
    if os.getppid() != parent:  # the parent died before the call
        os.kill(os.getpid(), signal.SIGHUP)
