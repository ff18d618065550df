"""A launch that trains: main_ppo as a watched child of the launcher, the relays and the evaluation watcher beside it.

Order: the relays start (and answer) before main_ppo, so every worker finds its node's relay; the watcher
(PUBLISH_EVALS=1) starts beside main_ppo and exits after this process does; when main_ppo ends, the relays drain
and each says what it sent and what is left. A stop (SIGTERM, SIGINT/Ctrl-C, SIGUSR1: what scancel, a SLURM
time limit or `--signal`, Kubernetes and a spot reclaim send) saves: the launcher asks the trainer to finish the step
in progress, save it and end (recipes/trainer/: a request file in the checkpoint folder), then says in one line
which step is saved where and that the same command resumes, and exits EXIT_RESUMABLE (75). A second signal, or a
step that has not ended STOP_WAIT_MINUTES after the first, stops main_ppo at once as before: SIGTERM (Ray's driver
exits on it; main_ppo ignores SIGINT itself, as a shell's background job does); the newest checkpoint stands and the
status is still 75. A Ctrl-C meant for training never reaches a relay (its own session) before the workers' last
flush. The progress watchdog (recipes/watchdog/, unless STALL_MINUTES=0) reads main_ppo's output on its way to the
console; a run that stops making progress gets a stall report and, with STALL_ACTION=stop, is stopped at once. The
exit status is otherwise main_ppo's (128 + the signal that ended it, as a shell says), or the watchdog's STALL_EXIT
when it stopped the run.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from recipes.constants import REPO_ROOT
from recipes.launch.console import quiet_environment
from recipes.launch.decision import Launch
from recipes.launch.relays import RelayStartError, say_summaries, start_relays
from recipes.private_files import Folder
from recipes.signals import WAKE_EVERY_S
from recipes.trainer import stop_request
from recipes.watchdog.watch import start_watch

OPEN_FILES = 65535  # Ray opens many sockets per node
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1)


class Stopped(Exception):
    """A stop signal before main_ppo started: nothing more is started."""


class StopRequest:
    """A stop asked of the launcher while main_ppo runs: the first signal asks the trainer to save and end at the
    step's end; a second one, or `wait_s` without an end, stops main_ppo at once."""

    def __init__(self, checkpoint_dir: str, wait_s: float, out):
        self.checkpoint_dir, self.wait_s, self.out = checkpoint_dir, wait_s, out
        self.why: str | None = None
        self.deadline: float | None = None
        self.at_once = False

    def signal(self, name: str, child: subprocess.Popen) -> None:
        if self.why is None and self.wait_s > 0:
            self.why, self.deadline = name, time.monotonic() + self.wait_s
            stop_request.request_stop(self.checkpoint_dir, name)
            print(f"[launch] {name}: finishing the step in progress, then a checkpoint and a stop (a second signal, "
                  f"or no end within {self.wait_s / 60:g} min, stops at once)", file=self.out, flush=True)
            return
        self.why = self.why or name
        self._at_once(child, f"{name} again" if self.deadline is not None else name)

    def check(self, child: subprocess.Popen) -> None:
        if self.deadline is not None and not self.at_once and time.monotonic() > self.deadline:
            self._at_once(child, f"no step end {self.wait_s:.0f} s after {self.why}")

    def _at_once(self, child: subprocess.Popen, why: str) -> None:
        if self.at_once or child.poll() is not None:
            return
        self.at_once = True
        print(f"[launch] {why}: stopping main_ppo at once (SIGTERM); the newest checkpoint stands", file=self.out,
              flush=True)
        child.send_signal(signal.SIGTERM)

    def outcome(self, status: int) -> int:
        """The launch's status, and its one line, once main_ppo has ended after a stop was asked."""
        stopped = stop_request.read_stopped(self.checkpoint_dir)
        if status == 0 and stopped is None:
            return 0  # the run ended on its own (its last step) meanwhile
        if status != 0 and not self.at_once:
            return status  # main_ppo failed by itself while the step was finishing
        saved = stop_request.latest_checkpoint(self.checkpoint_dir)
        where = (f"checkpoint of step {saved} in {self.checkpoint_dir}/global_step_{saved}" if saved is not None
                 else f"no checkpoint in {self.checkpoint_dir} (the run starts from scratch)")
        trained = f"after step {stopped['trained']}" if stopped else "at once"
        print(f"[launch] stopped ({self.why}) {trained}: {where}; run the same command to resume at step "
              f"{(saved or 0) + 1} (exit status {stop_request.EXIT_RESUMABLE})", file=self.out, flush=True)
        return stop_request.EXIT_RESUMABLE


def run_training(launch: Launch, out=None) -> int:
    from omegaconf import OmegaConf

    out = out or sys.stderr
    raise_open_files_limit(out)
    child: dict[str, subprocess.Popen] = {}
    checkpoint_dir = str(OmegaConf.select(launch.config, "trainer.default_local_dir"))
    stop = StopRequest(checkpoint_dir, launch.knobs.stop_wait_s, out)

    def on_signal(signum, _frame) -> None:
        if "main_ppo" in child:
            stop.signal(signal.Signals(signum).name, child["main_ppo"])
            return
        raise Stopped(signal.Signals(signum).name)

    previous = {sig: signal.signal(sig, on_signal) for sig in STOP_SIGNALS}
    relays, connected = None, False
    try:
        if launch.relay is not None:
            if launch.relay.cluster:
                connected = _connect_to_cluster(launch, out)
            relays = start_relays(launch.relay)
            print(f"[launch] Weave traces go through {relays.where}", file=out, flush=True)
        _start_watcher(launch, out)
        env = {**os.environ, **(relays.env if relays else {}), **quiet_environment(os.environ, launch.cluster),
               "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))}
        # the progress watchdog reads main_ppo's output on its way to the console (recipes/watchdog/)
        watch = start_watch(launch.knobs, (launch.ray_address or "auto") if launch.cluster else None, out)
        pipes = {} if watch is None else {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE}
        if watch is not None:
            env.setdefault("PYTHONUNBUFFERED", "1")  # each line as it is printed, not when a buffer fills
        stop_request.clear(checkpoint_dir)  # a request or an answer left by an earlier launch is not this one's
        # ignored while it starts: main_ppo (and the Ray it starts) inherit the ignore, as a shell's background job
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            # Ray puts the driver's cwd on every local worker's sys.path: our tools and recipes import there
            child["main_ppo"] = subprocess.Popen(launch.main_ppo_command(), env=env, cwd=REPO_ROOT, **pipes)
        finally:
            signal.signal(signal.SIGINT, on_signal)
        if watch is not None:
            watch.follow(child["main_ppo"])
        status = _wait(child["main_ppo"], stop)  # a Ctrl-C caught by the keeper's thread still reaches it
        status = status if status >= 0 else 128 - status
        status = status if watch is None else watch.finish(status)  # STALL_EXIT when the watchdog stopped it
        return status if stop.why is None else stop.outcome(status)
    except RelayStartError as err:
        print(f"error: {err}; nothing was started", file=out)
        return 1
    except Stopped as why:
        print(f"[launch] {why} before training started: stopping; nothing was trained, the same command starts it "
              f"(exit status {stop_request.EXIT_RESUMABLE})", file=out)
        return stop_request.EXIT_RESUMABLE
    finally:
        if relays is not None:
            for sig in STOP_SIGNALS:  # the drain finishes: the spools keep the rest anyway
                signal.signal(sig, signal.SIG_IGN)
            say_summaries(relays.stop(), launch.knobs.output_dir, out)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if connected:
            import ray

            ray.shutdown()


def _wait(child: subprocess.Popen, stop: StopRequest) -> int:
    """main_ppo's status; the main thread wakes every WAKE_EVERY_S (a signal handler that is due runs then, see
    recipes/signals.py) and stops main_ppo at once when a stop's wait is over."""
    while True:
        try:
            return child.wait(timeout=WAKE_EVERY_S)
        except subprocess.TimeoutExpired:
            stop.check(child)


def _connect_to_cluster(launch: Launch, out) -> bool:
    """This process joins the cluster main_ppo will join, to hold a relay keeper on each node (warning, in one line,
    when the cluster runs without authentication)."""
    import ray

    from recipes.trace_relay.names import NAMESPACE

    try:
        context = ray.init(address=launch.ray_address or None, namespace=NAMESPACE, log_to_driver=True)
    except Exception as err:  # main_ppo would not get in either
        raise RelayStartError(f"cannot join the Ray cluster at {launch.ray_address or 'RAY_ADDRESS'} to start a "
                              f"trace relay on each node: {type(err).__name__}: {err}") from err
    dashboard = getattr(context, "dashboard_url", None)
    if dashboard and not launch.job:  # a job's submitter said it already
        from recipes.launch.ray_job import warn_if_open

        warn_if_open(dashboard if "://" in dashboard else f"http://{dashboard}", out)
    return True


def _start_watcher(launch: Launch, out) -> None:
    command = launch.watcher_command(os.getpid())
    if command is None:
        return
    log = Path(launch.knobs.output_dir) / "publish_evals.log"
    try:
        with Folder.open(log.parent, create=True) as folder:  # never through a link another user planted there
            handle = folder.open_file(log.name, os.O_WRONLY | os.O_APPEND)
    except OSError as err:
        print(f"warning: validations are not published to Weave while training (its log: {err})", file=out)
        return
    handler = signal.signal(signal.SIGINT, signal.SIG_IGN)  # as a shell's background job: Ctrl-C is for training
    try:
        subprocess.Popen(command, stdout=handle, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=REPO_ROOT)
    finally:
        os.close(handle)
        signal.signal(signal.SIGINT, handler)
    print(f"[launch] publishing each validation to Weave in the background (log: {log})", file=out)


def raise_open_files_limit(out) -> None:
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft >= OPEN_FILES:
        return
    for limits in ((OPEN_FILES, max(hard, OPEN_FILES)), (min(OPEN_FILES, hard), hard)):
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, limits)
            break
        except (ValueError, OSError):
            continue
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < OPEN_FILES:
        print(f"warning: open-files limit {soft} (hard limit {hard}), under the {OPEN_FILES} the launcher asks for: "
              "a busy node can fail with 'Too many open files'; raise the hard limit before launching (`ulimit -Hn`, "
              "/etc/security/limits.conf, or a container's --ulimit nofile=65535)", file=out)
