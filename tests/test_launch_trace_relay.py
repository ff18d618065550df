"""The launcher with its trace relay: the plan names the relay (one node: this node's; a Ray cluster: one on every
node), a launch starts it, hands its URL to main_ppo's processes, stops it after main_ppo (also on SIGTERM) and says
what is left.

Real launcher (scripts/run_gsm8k_grpo.sh -> python -m recipes.launch), real relay, W&B as the loopback stand-in.
What cannot run here is replaced by a `PYTHON` shim: main_ppo (training) by a process that traces as an agent-loop
worker does. The launch runs on the CPU platform (VERL_PLATFORM=cpu, PROFILE=cpu_smoke), so the preflight has no
GPU to check; all its other checks run."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.standins.weave_http_server import API_KEY, loopback_wandb
from recipes.constants import REPO_ROOT
from recipes.trainer.stop_request import EXIT_RESUMABLE
from testkit.commands import command as installed
from testkit.launcher import clean_environ, plan
from testkit.threads import other_threads

pytestmark = [pytest.mark.integration, pytest.mark.timeout(400)]
CALLS = 20
LAST_STEP_CALLS = 5  # traced by main_ppo's processes while they shut down

MAIN_PPO_STAND_IN = """
import os, signal, sys, time
from recipes.trace_relay.client import use_trace_relay
assert use_trace_relay(), "no trace relay in main_ppo's environment"  # as each agent-loop worker does
if os.environ.get("STAND_IN_TOKEN_FILE"):  # the key weave presents: the launch's token, handed down by the launcher
    open(os.environ["STAND_IN_TOKEN_FILE"], "w").write(os.environ["WANDB_API_KEY"])
import weave
client = weave.init("launch-relay-test")

from recipes.trainer import stop_request
checkpoints = os.path.join(os.environ["OUTPUT_DIR"], "checkpoints")

def last_step(*_, asked=False):  # the end of a step still in flight when training is stopped: traced and flushed
    for i in range(int(os.environ["STAND_IN_LAST_STEP_CALLS"])):
        client.finish_call(client.create_call("Rollout.last_step", {"i": i}), output={"reward": 0.0})
    client.flush()
    if asked:  # as the recipe's trainer answers a stop request at the step's end (no checkpoint: save_freq<=0)
        stop_request.record_stopped(checkpoints, trained=2, saved=None)
        os._exit(0)
    os._exit(128 + signal.SIGTERM)

if os.environ.get("STAND_IN_TRAIN_FOREVER"):
    signal.signal(signal.SIGTERM, last_step)
for i in range(int(os.environ["STAND_IN_CALLS"])):
    client.finish_call(client.create_call("Rollout.run", {"i": i}), output={"reward": 1.0})
client.flush()  # the worker's per-step flush
open(os.environ["STAND_IN_PID_FILE"], "w").write(str(os.getpid()))  # a step done
print("(TaskRunner pid=1) step:1 - stand_in/calls:%d" % int(os.environ["STAND_IN_CALLS"]), flush=True)  # as verl's
if os.environ.get("STAND_IN_TRAIN_FOREVER"):
    while True:  # until the launcher asks for a stop, or passes on a SIGTERM (short sleeps: whichever thread takes
        if stop_request.stop_requested(checkpoints):  # it, the handler runs)
            last_step(asked=True)
        time.sleep(0.5)
os._exit(0)  # Ray's workers die without atexit
"""


def python_shim(tmp_path: Path) -> Path:
    stand_in = tmp_path / "main_ppo_stand_in.py"
    stand_in.write_text(MAIN_PPO_STAND_IN)
    shim = tmp_path / "python"
    shim.write_text(f"""#!/usr/bin/env bash
if [ "$1 $2" = "-m recipes.trainer.main_ppo" ]; then exec {shlex.quote(sys.executable)} {shlex.quote(str(stand_in))}; fi
exec {shlex.quote(sys.executable)} "$@"
""")
    shim.chmod(0o755)
    return shim


def launch_env(tmp_path: Path, **env: str) -> dict[str, str]:
    base = {k: v for k, v in clean_environ().items() if not k.startswith(("WANDB", "WF_", "WEAVE"))}
    return {**base, "PYTHON": str(python_shim(tmp_path)), "PROFILE": "cpu_smoke", "VERL_PLATFORM": "cpu",
            "TRACE": "on", "OUTPUT_DIR": str(tmp_path / "run"), "STAND_IN_CALLS": str(CALLS),
            "WANDB_ERROR_REPORTING": "false", "STAND_IN_PID_FILE": str(tmp_path / "main_ppo.pid"),
            "WEAVE_PRINT_CALL_LINK": "false", **env}


def what_hung(launcher: subprocess.Popen, hung: subprocess.TimeoutExpired, relay_log: Path) -> str:
    """Which of the launch's processes are still there, what the launcher printed, the end of the relay's log."""
    ps = subprocess.run(["ps", "-o", "pid,ppid,stat,wchan:20,args", "-s", str(launcher.pid)], capture_output=True,
                        text=True).stdout
    log = relay_log.read_text(errors="replace").splitlines()[-15:] if relay_log.exists() else ["(no relay log)"]
    printed = hung.stderr.decode(errors="replace") if isinstance(hung.stderr, bytes) else (hung.stderr or "")
    return (f"the launch did not stop in {hung.timeout:.0f} s\nstill running:\n{ps}\nthe launcher printed:\n"
            f"{printed}\nthe relay's log ends:\n" + "\n".join(log))


def test_the_plan_names_the_relays_it_would_start(prepared_data_dir, default_dry_run):
    relay = default_dry_run.launch.relay
    run_dir = f"{REPO_ROOT}/outputs/gsm8k_calculator_Qwen2.5-3B-Instruct_8xh100"  # the default OUTPUT_DIR
    assert (relay.cluster, relay.spool, relay.log, relay.offline) == (False, f"{run_dir}/trace_spool",
                                                                     f"{run_dir}/trace_relay.log", False)
    assert f"-m recipes.trace_relay serve --spool {run_dir}/trace_spool " in relay.describe()
    offline = plan(prepared_data_dir, DRY_RUN="1", OUTPUT_DIR="/runs/a", TRACE_RELAY="offline", WANDB_ENTITY="me",
                   TRACE_SPOOL="/data/spool").launch.relay
    assert (offline.spool, offline.offline, offline.entity) == ("/data/spool", True, "me")
    assert "--offline --entity me" in offline.describe()
    for env in ({"TRACE_RELAY": "off"}, {"TRACE": "off"}):  # no relay when asked for none, or nothing traces
        planned = plan(prepared_data_dir, DRY_RUN="1", **env)
        assert planned.preflight.ok and planned.launch.relay is None, planned.err


def test_an_air_gapped_cluster_keeps_traces_on_every_node(prepared_data_dir):
    """TRACE_RELAY=offline on many nodes: a relay per node, each keeping its node's traces for gsm8k-upload-traces."""
    planned = plan(prepared_data_dir, DRY_RUN="1", PROFILE="multinode", SUBMIT="ray", RAY_ADDRESS="http://h:8265",
                   OUTPUT_DIR="/shared/runs/b", TRACE_RELAY="offline", WANDB_ENTITY="me")
    assert planned.preflight.ok, planned.err
    relay = planned.launch.relay
    spool = f"/var/tmp/gsm8k_recipe_traces-{os.geteuid()}/gsm8k_calculator_Qwen2.5-3B-Instruct_multinode"
    assert (relay.cluster, relay.offline, relay.spool) == (True, True, spool)
    assert f"--spool {spool}/<node>" in relay.describe()


STALL_MINUTES = "0.2"  # "stall": after step 1 the stand-in makes no progress; the watchdog stops it this much later


@pytest.mark.parametrize("stop_by", ["sigterm", "ctrl_c", "sigint_taken_by_a_thread", "stall"])
def test_stopping_training_stops_main_ppo_then_the_relay_sends_everything(prepared_data_dir, tmp_path, stop_by):
    """SIGTERM to the launcher (a scheduler), or SIGINT to its whole process group (Ctrl-C in a terminal, which
    reaches the relay too), or a SIGINT that one of the launcher's other threads takes (the kernel may hand it to
    any; CI once hung there for good): main_ppo is asked to stop at its step's end; or the progress watchdog once
    main_ppo has made no progress for STALL_MINUTES (its report names the stand-in's loop) stops it at once. What it
    traces while stopping still goes through the relay."""
    stall = {"STALL_MINUTES": STALL_MINUTES} if stop_by == "stall" else {}
    with loopback_wandb() as wandb:
        env = launch_env(tmp_path, DATA_DIR=str(prepared_data_dir), STAND_IN_TRAIN_FOREVER="1",
                         STAND_IN_LAST_STEP_CALLS=str(LAST_STEP_CALLS), **stall, **wandb.env)
        # SIGINT at its default, as in a terminal: a launcher that starts with it ignored (inherited, e.g. from a
        # test worker whose SIGINT some earlier test left ignored) cannot trap it, and Ctrl-C would do nothing
        launcher = subprocess.Popen(["bash", str(REPO_ROOT / "scripts" / "run_gsm8k_grpo.sh")], env=env,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                    stdin=subprocess.DEVNULL, start_new_session=True,
                                    preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        try:
            received = wandb.wait_for_calls(CALLS, timeout_s=240)
            assert len(received) == CALLS, launcher.poll() or "the relay did not deliver"
            pid_file = tmp_path / "main_ppo.pid"
            while not pid_file.exists() and launcher.poll() is None:  # its step's flush has returned
                time.sleep(0.1)
            if stop_by == "ctrl_c":
                os.killpg(launcher.pid, signal.SIGINT)
            elif stop_by == "sigterm":
                launcher.send_signal(signal.SIGTERM)
            elif stop_by == "sigint_taken_by_a_thread":  # the launcher is the process bash exec'd
                os.kill(other_threads(launcher.pid)[0], signal.SIGINT)
            try:
                stdout, stderr = launcher.communicate(timeout=180)
            except subprocess.TimeoutExpired as hung:
                raise AssertionError(what_hung(launcher, hung, tmp_path / "run" / "trace_relay.log")) from None
            received = wandb.storage.complete_call_ids()
        finally:
            if launcher.poll() is None:
                os.killpg(launcher.pid, signal.SIGKILL)
    made = CALLS + LAST_STEP_CALLS
    print(f"launch through the relay, stopped by {stop_by}: {made} calls made, "
          f"{len(received)} received")
    assert len(received) == made, stderr
    pid = int((tmp_path / "main_ppo.pid").read_text())
    assert not Path(f"/proc/{pid}").exists()  # the launcher passed the signal on to training
    assert "[launch] Weave traces go through the trace relay http://127.0.0.1:" in stderr
    stopped = next(line for line in stderr.splitlines() if line.startswith("[traces] trace relay on "))
    assert stopped.endswith(", 0 pending"), stopped
    assert "gsm8k-upload-traces" not in stderr
    assert "step:1 - stand_in/calls:" in stdout  # main_ppo's output reached the console through the watchdog
    if stop_by != "stall":  # asked to stop at its step's end: "stopped, resumable" and the line that says so
        assert launcher.returncode == EXIT_RESUMABLE and "[stall] watchdog: no stall;" in stderr, stderr
        name = "SIGINT" if "sigint" in stop_by or stop_by == "ctrl_c" else "SIGTERM"
        assert f"[launch] stopped ({name}) after step 2: no checkpoint in {tmp_path}/run/checkpoints" in stderr
        return
    from recipes.watchdog.watch import STALL_EXIT

    assert launcher.returncode == STALL_EXIT, stderr
    culprit = next(line for line in stderr.splitlines() if line.startswith("[stall] likely culprit: "))
    assert f"pid {pid} " in culprit and "main_ppo_stand_in.py:" in culprit and "in step 2" in culprit, culprit
    report = Path(culprit.rsplit("report: ", 1)[1])
    assert report.parent == tmp_path / "run" / "stall" and (report / "summary.md").read_text().count(culprit) == 1
    assert stderr.index(culprit) < stderr.index("STALL_ACTION=stop: stopping") < stderr.index(stopped)  # in this order


def test_air_gapped_launch_keeps_traces_and_prints_the_upload_command(prepared_data_dir, tmp_path):
    """Also: the launch's token reached main_ppo's processes, which traced with it, and was written nowhere else."""
    token_seen = tmp_path / "token_seen_by_main_ppo"
    env = launch_env(tmp_path, DATA_DIR=str(prepared_data_dir), TRACE_RELAY="offline", WANDB_ENTITY="loopback-entity",
                     STAND_IN_TOKEN_FILE=str(token_seen))
    proc = subprocess.run(["bash", str(REPO_ROOT / "scripts" / "run_gsm8k_grpo.sh")], env=env, capture_output=True,
                          text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr  # no W&B key needed, nothing reached W&B, training succeeded
    spool = tmp_path / "run" / "trace_spool"
    token = token_seen.read_text()
    assert len(token) >= 40 and token not in proc.stdout + proc.stderr
    assert not [p for p in (tmp_path / "run").rglob("*") if p.is_file() and token.encode() in p.read_bytes()]
    assert oct(spool.stat().st_mode & 0o777) == "0o700"
    assert oct((tmp_path / "run" / "trace_relay.log").stat().st_mode & 0o777) == "0o600"
    stopped = next(line for line in proc.stderr.splitlines() if line.startswith("[traces] trace relay on "))
    assert ": 0 trace records sent to W&B, " in stopped, stopped
    command = shlex.split(stopped.split("`")[1])  # the command the summary tells the user to run
    assert command == ["gsm8k-upload-traces", "--spool", str(spool)]
    with loopback_wandb() as wandb:  # later, on a machine that reaches W&B, the printed command
        sent = subprocess.run([*installed(command[0]), *command[1:], "--upstream", wandb.url], cwd=REPO_ROOT,
                              env={**launch_env(tmp_path), "WANDB_API_KEY": API_KEY}, capture_output=True,
                              text=True, timeout=180)
        received = wandb.storage.complete_call_ids()
    print(f"air-gapped launch: {CALLS} calls made, {len(received)} received after the upload")
    assert sent.returncode == 0, sent.stdout + sent.stderr
    assert len(received) == CALLS
