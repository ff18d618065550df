"""A launch that trains: main_ppo as a watched child of the launcher, the relays and the evaluation watcher beside it.

Order: the relays start (and answer) before main_ppo, so every worker finds its node's relay; the watcher
(PUBLISH_EVALS=1) starts beside main_ppo and exits after this process does; when main_ppo ends, the relays drain
and each says what it sent and what is left. Ctrl-C and SIGTERM reach main_ppo as SIGTERM (Ray's driver exits
cleanly on it; main_ppo ignores SIGINT itself, as a shell's background job does); a Ctrl-C meant for training never
reaches a relay (its own session) before the workers' last flush. The progress watchdog (recipes/watchdog/, unless
STALL_MINUTES=0) reads main_ppo's output on its way to the console; a run that stops making progress gets a stall
report and, with STALL_ACTION=stop, is stopped the same way. The exit status is main_ppo's (128 + the signal that
ended it, as a shell says), or the watchdog's STALL_EXIT when it stopped the run.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from recipes.constants import REPO_ROOT
from recipes.launch.console import quiet_environment
from recipes.launch.decision import Launch
from recipes.launch.relays import RelayStartError, say_summaries, start_relays
from recipes.signals import wait_for_child
from recipes.watchdog.watch import start_watch

OPEN_FILES = 65535  # Ray opens many sockets per node


class Stopped(Exception):
    """SIGINT/SIGTERM before main_ppo started: nothing more is started."""


def run_training(launch: Launch, out=None) -> int:
    out = out or sys.stderr
    raise_open_files_limit(out)
    child: dict[str, subprocess.Popen] = {}

    def on_signal(signum, _frame) -> None:
        if "main_ppo" in child:
            if child["main_ppo"].poll() is None:
                child["main_ppo"].send_signal(signal.SIGTERM)
            return
        raise Stopped(signal.Signals(signum).name)

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
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
        # ignored while it starts: main_ppo (and the Ray it starts) inherit the ignore, as a shell's background job
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            # Ray puts the driver's cwd on every local worker's sys.path: our tools and recipes import there
            child["main_ppo"] = subprocess.Popen(launch.main_ppo_command(), env=env, cwd=REPO_ROOT, **pipes)
        finally:
            signal.signal(signal.SIGINT, on_signal)
        if watch is not None:
            watch.follow(child["main_ppo"])
        status = wait_for_child(child["main_ppo"])  # a Ctrl-C caught by the keeper's thread still reaches it
        status = status if status >= 0 else 128 - status
        return status if watch is None else watch.finish(status)  # STALL_EXIT when the watchdog stopped it
    except RelayStartError as err:
        print(f"error: {err}; nothing was started", file=out)
        return 1
    except Stopped as why:
        print(f"[launch] {why} before training started: stopping", file=out)
        return 130
    finally:
        if relays is not None:
            for sig in (signal.SIGINT, signal.SIGTERM):  # the drain finishes: the spools keep the rest anyway
                signal.signal(sig, signal.SIG_IGN)
            say_summaries(relays.stop(), launch.knobs.output_dir, out)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if connected:
            import ray

            ray.shutdown()


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
    log.parent.mkdir(parents=True, exist_ok=True)
    handler = signal.signal(signal.SIGINT, signal.SIG_IGN)  # as a shell's background job: Ctrl-C is for training
    try:
        with open(log, "ab") as handle:
            subprocess.Popen(command, stdout=handle, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                             cwd=REPO_ROOT)
    finally:
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
