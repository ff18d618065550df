"""The launcher's progress watchdog over main_ppo (recipes/launch/training.py starts it; STALL_MINUTES=0: none).

main_ppo's output passes through the launcher (recipes/watchdog/output.py) and each line that says the run moved
on (recipes/watchdog/progress.py) resets the clock (recipes/watchdog/clock.py). A thread looks every `poll_s`;
when nothing moved for longer than the limit it
1. says so, then samples every process of the run on every node over a window (recipes/watchdog/cluster.py)
   and writes the stall report (recipes/watchdog/stall_report.py);
2. prints one line: the likely culprit (process and frame) and the report's folder;
3. STALL_ACTION=stop: stops main_ppo as Ctrl-C does (SIGTERM; the launcher then drains the relays, traces kept),
   SIGKILLs it if it has not ended after STOP_GRACE_S, and once it has, SIGKILLs what it left behind (a stopped
   or hung process of its tree that Ray's shutdown could not end); the launch exits STALL_EXIT.
   STALL_ACTION=report: the run goes on, and a new report comes only after another limit with still no progress.
It never imports torch or touches a GPU: the samples come from py-spy, psutil and nvidia-smi, run from outside.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil

from recipes.watchdog.clock import StallClock
from recipes.watchdog.cluster import CLUSTER_EXTRA_S, gather
from recipes.watchdog.output import OutputPump
from recipes.watchdog.progress import progress_in
from recipes.watchdog.sample import SAMPLES, WINDOW_S
from recipes.watchdog.stall_report import write_report

STALL_EXIT = 124  # the launch's status when the watchdog stopped it (as `timeout` says a command ran too long)
POLL_MAX_S, POLL_MIN_S = 30.0, 1.0
STOP_GRACE_S = 120.0
STALL_DIR = "stall"  # under OUTPUT_DIR


class StallWatch:
    def __init__(self, limit_minutes: float | None, action: str, output_dir: str, cluster_address: str | None,
                 out=None) -> None:
        self.clock = StallClock(None if limit_minutes is None else limit_minutes * 60)
        self.action, self.cluster_address = action, cluster_address
        self.stall_dir = Path(output_dir) / STALL_DIR
        self.out = out or sys.stderr
        self.pump = OutputPump(self.on_line)
        self.reports: list = []
        self.stopped_run = False
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._quiet_since = self.clock.last_progress  # the later of the last progress and the last report
        self._child: subprocess.Popen | None = None
        self._leftovers: list[tuple[int, float]] = []
        self._report_due = 0.0  # while a report is being written: when its sampling must be over
        self._thread = threading.Thread(target=self._run, name="stall-watch", daemon=True)
        self.cpu_s = 0.0

    # -- main_ppo's side -------------------------------------------------------------------------------------------
    def follow(self, child: subprocess.Popen) -> None:
        """Start reading `child`'s output (Popen with stdout=PIPE, stderr=PIPE) and watching its progress."""
        self._child = child
        with self._lock:
            self.clock = StallClock(self.clock.user_s)  # the clock starts with main_ppo
            self._quiet_since = self.clock.last_progress
        self.pump.start(child.stdout, child.stderr)
        self._thread.start()
        self._say(f"progress watchdog on: a report and STALL_ACTION={self.action} after {self.clock.describe_limit()} "
                  f"with no step, validation or checkpoint (STALL_MINUTES=0: off)")

    def on_line(self, line: str) -> None:
        progress = progress_in(line)
        if progress is not None:
            with self._lock:
                self.clock.progress(progress.what, progress.step)

    def finish(self, status: int) -> int:
        """After main_ppo ended: the launch's exit status; the leftovers of a stopped run are ended."""
        self._done.set()
        self.pump.join(timeout_s=5.0)
        if self._thread.is_alive():  # a report being written is finished first (its sampling has a deadline)
            self._thread.join(timeout=max(5.0, self._report_due - time.monotonic()))
        if self.stopped_run:
            self._kill_leftovers()
        self.cpu_s += self.pump.cpu_s
        verdict = (f"{len(self.reports)} stall report(s): {', '.join(str(r.path) for r in self.reports)}"
                   if self.reports else "no stall")
        self._say(f"watchdog: {verdict}; last progress: {self.clock.last_what}; {self.pump.lines} lines of "
                  f"main_ppo's output read; watchdog CPU {self.cpu_s:.3f} s")
        return STALL_EXIT if self.stopped_run else status

    # -- the watching thread ---------------------------------------------------------------------------------------
    def poll_s(self) -> float:
        return min(POLL_MAX_S, max(POLL_MIN_S, self.clock.limit_s() / 10))

    def _run(self) -> None:
        try:
            while not self._done.wait(self.poll_s()):
                with self._lock:
                    quiet_s = self.clock.now() - max(self.clock.last_progress, self._quiet_since)
                    due = quiet_s > self.clock.limit_s()
                if due:
                    self._alarm()
                    if self.stopped_run:
                        return
        finally:
            self.cpu_s += time.thread_time()

    def _alarm(self) -> None:
        with self._lock:
            self._quiet_since = self.clock.now()  # the next report: after another limit with still no progress
            clock = {"idle_s": self.clock.idle_s(), "limit": self.clock.describe_limit(),
                     "last_what": self.clock.last_what, "last_step": self.clock.last_step,
                     "limit_s": self.clock.limit_s()}
        window = min(WINDOW_S, clock["limit_s"] / 2)
        self._report_due = time.monotonic() + window + (CLUSTER_EXTRA_S if self.cluster_address else 0) + 30
        self._say(f"no progress for {clock['idle_s'] / 60:.1f} min (limit {clock['limit']}; last: "
                  f"{clock['last_what']}): sampling every process of the run for {window:.0f} s")
        try:
            nodes, errors = gather(self._child.pid, window, SAMPLES, self.cluster_address)
            clock["last_ago_s"] = self.clock.idle_s()
            report = write_report(self.stall_dir, nodes, clock, self.pump.tail(), errors)
        except Exception as err:  # the evidence failed; the action must not
            self._say(f"the stall report failed: {type(err).__name__}: {err}")
            nodes, report = [], None
        if report is not None:
            self.reports.append(report)
            print(report.line(), file=self.out, flush=True)
        if self.action == "stop" and self._child.poll() is None:
            self._leftovers = _tree_of(nodes, self._child.pid)
            self._say("STALL_ACTION=stop: stopping the run as Ctrl-C does (main_ppo stopped, then the trace relays "
                      f"drain); exit status {STALL_EXIT}")
            self.stopped_run = True
            self._stop_child()

    def _stop_child(self) -> None:
        self._child.send_signal(signal.SIGTERM)
        try:
            self._child.wait(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            self._say(f"main_ppo did not end {STOP_GRACE_S:.0f} s after SIGTERM: SIGKILL")
            self._kill_leftovers()
            self._child.kill()

    def _kill_leftovers(self) -> None:
        """SIGKILL the processes of main_ppo's tree (as sampled) that are still there: same pid, same start."""
        killed = []
        for pid, created in self._leftovers:
            try:
                proc = psutil.Process(pid)
                if created is not None and abs(proc.create_time() - created) > 1.0:
                    continue
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            except (psutil.Error, ProcessLookupError, PermissionError):
                continue
        if killed:
            self._say(f"ended {len(killed)} process(es) main_ppo left behind: {' '.join(map(str, killed))}")

    def _say(self, text: str) -> None:
        print(f"[stall] {text}", file=self.out, flush=True)


def _tree_of(nodes: list[dict], main_ppo_pid: int) -> list[tuple[int, float]]:
    """(pid, start time) of main_ppo's tree on this node, as the report sampled it."""
    return [(p["pid"], p["create_time"]) for node in nodes if node.get("local") for p in node["processes"]
            if p["pid"] != main_ppo_pid]


def start_watch(knobs, cluster_address: str | None, out=None) -> StallWatch | None:
    """The watchdog a launch with these knobs runs; None when STALL_MINUTES=0."""
    from recipes.watchdog.clock import stall_limit_minutes

    minutes = stall_limit_minutes(knobs.stall_minutes)
    if minutes == 0:
        return None
    return StallWatch(minutes, knobs.stall_action, knobs.output_dir, cluster_address, out)
