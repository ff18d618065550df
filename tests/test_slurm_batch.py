"""scripts/run_gsm8k_grpo.sbatch where a cluster is unkind to it, without training: on the two-node SLURM of the
`slurm_nodes` fixture (namespaced nodes; node0's first interface reaches nothing), an allocation without GPUs is refused
in one line before anything starts; a stop that comes before the launcher runs requeues the job (the traps are set
first), with the head's address said and Ray stopped; `python -m recipes.launch.ray_nodes hold`, the Ray steps'
front, keeps a process tree through the SIGTERM a preemption sends to every process of a step, and `watch` passes
that SIGTERM on to the batch script once.
The full two-node job, preempted and resumed: tests/test_preempt.py."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness import cpu_run
from recipes.constants import REPO_ROOT

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]  # SLURM: with the preempt test, on its worker
TERM_BLOCKED = 1 << (signal.SIGTERM - 1)
RAY_PROCESSES = ("gcs_server", "raylet", "ray start", "ray::")


def _job(env: dict, job_id: str) -> dict[str, str]:
    shown = subprocess.run(["scontrol", "show", "job", job_id], env=env, capture_output=True, text=True).stdout
    return dict(re.findall(r"(\w+)=(\S*)", shown))


def _submit(slurm: dict, log: Path, **knobs: str) -> tuple[str, dict]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "SLURM_", "PROFILE", "N_GPUS", "NNODES"))}
    env = {**env, "PYTHON": sys.executable, "OUTPUT_DIR": str(log.parent / "outputs"), **slurm["env"], **knobs}
    submit = ["bash", "-c", 'source scripts/cpu_env.sh && exec sbatch --parsable --nodes=1 --output="$0" '
              "scripts/run_gsm8k_grpo.sbatch", str(log)]
    job_id = subprocess.run(submit, cwd=REPO_ROOT, env=env, capture_output=True, text=True, check=True).stdout
    return job_id.strip().split(";")[0], env


def _wait_state(env: dict, job_id: str, done, timeout_s: float = 300, log: Path | None = None) -> dict[str, str]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        job = _job(env, job_id)
        if done(job):
            return job
        time.sleep(1)
    said = log.read_text()[-4000:] if log is not None and log.exists() else ""
    raise AssertionError(f"job {job_id}: {_job(env, job_id)}\n{said}")


def test_an_allocation_without_gpus_is_refused_in_one_line_before_anything_starts(slurm_nodes, tmp_path):
    log = tmp_path / "job.out"
    job_id, env = _submit(slurm_nodes, log)  # the default profile (8xh100), no --gpus-per-node, no N_GPUS_PER_NODE
    job = _wait_state(env, job_id, lambda j: j.get("JobState") in ("FAILED", "COMPLETED", "CANCELLED"))
    text = log.read_text()
    assert job["JobState"] == "FAILED" and job["ExitCode"] == "1:0", (job, text)
    said = [line for line in text.splitlines() if line.startswith("[sbatch]")]
    assert said == ["[sbatch] error: no GPUs in this allocation (SLURM_GPUS_ON_NODE unset: --exclusive without "
                    "--gpus-per-node counts none): submit with --gpus-per-node=8, or set N_GPUS_PER_NODE where SLURM "
                    "does not count the nodes' GPUs"], text
    assert "[ray_nodes]" not in text and "Ray runtime started" not in text


def _late_srun(folder: Path, env: dict) -> str:
    """A PATH whose `srun` launches the `watch` step seconds late and loses a signal meanwhile, as a busy node's srun
    does with one that comes before its step exists (the first stop of a job stopped while Ray starts)."""
    real = shutil.which("srun", path=env["PATH"])
    folder.mkdir()
    wrapper = folder / "srun"
    wrapper.write_text(f'#!/usr/bin/env bash\ncase " $* " in *" watch "*) trap : USR2; sleep 4 ;; esac\n'
                       f'exec {shlex.quote(real)} "$@"\n')
    wrapper.chmod(0o755)
    return f"{folder}:{env['PATH']}"


def test_a_stop_before_the_launcher_runs_requeues_the_job_and_stops_ray(slurm_nodes, tmp_path):
    """USR1 as soon as the script says it started: the traps come first, so the batch shell lives, says it, stops the
    Ray head it started and requeues; nothing was trained. The stop reaches a step that srun launches late (it is
    sent again until every step has ended). A CPU profile needs no GPUs; the head's address is node0's first (on an
    interface that reaches nothing, said with the others and the knobs that choose)."""
    from testkit import namespaced_nodes

    log = tmp_path / "job.out"
    path = _late_srun(tmp_path / "bin", {**os.environ, **slurm_nodes["env"]})
    job_id, env = _submit(slurm_nodes, log, PROFILE="cpu_smoke", RAY_HEAD_ARGS="--include-dashboard=false", PATH=path)
    try:
        cpu_run.wait_for(log, r"\[sbatch\] job \d+, start 1", None, 300)
        subprocess.run(["scancel", "--signal=USR1", "--batch", job_id], env=env, check=True)
        job = _wait_state(env, job_id, lambda j: (j.get("Restarts"), j.get("JobState")) == ("1", "PENDING") or
                          j.get("JobState") in ("FAILED", "COMPLETED", "CANCELLED"), log=log)
    finally:
        subprocess.run(["scancel", job_id], env=env)
    text = log.read_text()
    node0 = slurm_nodes["net"]["nodes"]["node0"]
    assert (job["Restarts"], job["JobState"]) == ("1", "PENDING"), (job, text[-4000:])
    assert re.search(rf"\[sbatch\] job {job_id}, start 1: 1 node\(s\) \(node0\), head node0, 1 GPU\(s\)", text), text
    assert (f"[ray_nodes] the Ray head's address: {node0['second_nic']['address']} (the first address of this node, "
            f"on nic0; also {node0['address']} (eth0): RAY_HEAD_INTERFACE or RAY_HEAD_IP choose another)") in text
    said = [line for line in text.splitlines() if line.startswith("[sbatch]")][1:]
    assert said == ["[sbatch] USR1 received before the launcher started",
                    f"[sbatch] stopped (USR1) before training started: requeueing job {job_id}"], text[-4000:]
    assert "[launch]" not in text, "the launcher never ran"
    _wait_state(env, job_id, lambda j: j.get("JobState") == "CANCELLED")
    left = [_cmdline(pid) for pid in namespaced_nodes.processes_in([node0["netns"]])]
    assert not [c for c in left if any(name in c for name in RAY_PROCESSES)], left


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _blocked(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigBlk:"):
            return int(line.split()[1], 16)
    raise AssertionError(pid)


def _tree(pid: int) -> list[int]:
    from recipes.launch.ray_nodes import _descendants

    return _descendants(pid)


def test_hold_keeps_a_process_tree_through_sigterm_and_stops_it_when_told(tmp_path):
    """As a step's processes get a preemption's SIGTERM: every process of the tree, the front included. The command
    (a parent that starts a child, both Python with their own SIGTERM handlers, as Ray's are) and its child live on;
    SIGUSR2 to the front stops all of it, exit 0."""
    command = ("import signal, subprocess, sys, time\n"
               "signal.signal(signal.SIGTERM, lambda *a: sys.exit('SIGTERM reached the command'))\n"
               "subprocess.Popen([sys.executable, '-c', 'import signal, sys, time; signal.signal(signal.SIGTERM, "
               "lambda *a: sys.exit(1)); time.sleep(600)'])\n"
               "time.sleep(600)\n")
    log = tmp_path / "hold.log"
    with open(log, "w") as out:
        front = subprocess.Popen([sys.executable, "-m", "recipes.launch.ray_nodes", "hold", "--", sys.executable, "-c",
                                  command], cwd=REPO_ROOT, stdout=out, stderr=subprocess.STDOUT)
    tree: list[int] = []
    try:
        deadline = time.monotonic() + 60
        while len(tree := _tree(front.pid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(1)  # the command's and its child's handlers are set
        assert len(tree) == 2 and all(_blocked(pid) & TERM_BLOCKED for pid in tree), tree
        for _ in range(2):
            for pid in (front.pid, *tree):
                os.kill(pid, signal.SIGTERM)
            time.sleep(1)
        assert front.poll() is None and all(_alive(pid) for pid in tree), log.read_text()
        front.send_signal(signal.SIGUSR2)
        assert front.wait(timeout=30) == 0
        time.sleep(0.5)
        assert not [pid for pid in tree if _alive(pid)]
        node = os.uname().nodename
        kept = (f"[ray node {node}] SIGTERM (a preemption's grace time, or scancel): Ray goes on until the batch "
                "script stops it")
        assert log.read_text().splitlines() == [kept, kept, f"[ray node {node}] stopped by the batch script"]
    finally:
        front.kill()
        front.wait()
        for pid in tree:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_watch_passes_the_first_sigterm_to_the_batch_script_and_ends_when_told(tmp_path):
    said = tmp_path / "batch.said"
    batch = subprocess.Popen(["bash", "-c", f'trap "echo TERM >> {said}" TERM; while :; do sleep 0.1; done'])
    watcher = subprocess.Popen([sys.executable, "-m", "recipes.launch.ray_nodes", "watch", "--tell", str(batch.pid)],
                               cwd=REPO_ROOT, stdout=subprocess.PIPE, text=True)
    try:
        time.sleep(3)  # its handlers are set
        for _ in range(2):  # twice: the batch script hears of it once
            watcher.send_signal(signal.SIGTERM)
            time.sleep(1)
        assert watcher.poll() is None and said.read_text() == "TERM\n"
        watcher.send_signal(signal.SIGUSR2)
        assert watcher.wait(timeout=30) == 0
        node = os.uname().nodename
        assert watcher.stdout.read().splitlines() == [
            f"[stop watch {node}] SIGTERM (a preemption's grace time, or scancel): passed to the batch script",
            f"[stop watch {node}] SIGTERM again: the batch script has it already"]
    finally:
        for proc in (watcher, batch):
            proc.kill()
            proc.wait()


def _alive(pid: int) -> bool:
    """Running (a zombie is not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
