"""Stop = save, resume = the same command: the real launcher and verl's main_ppo on the CPU, through
scripts/run_gsm8k_grpo.sbatch on a real SLURM (slurmctld and slurmd on this machine, the `local_slurm` fixture).

One CPU run of 3 steps with `save_freq` 3 (no periodic checkpoint before the end), traces on to the loopback W&B,
W&B offline. While step 2 trains, the batch shell gets USR1 (`scancel --signal=USR1 --batch`, what
`#SBATCH --signal=B:USR1@<s>` sends before a time limit) and forwards it to the launcher: the step is saved, the
launcher exits 75 with its one line and no Ray signal dump, the script requeues the job; SLURM starts it again (the
test skips SLURM's requeue delay, `scontrol update StartTime=now`) and the same command resumes at step 3 and trains
only it, with the data order the first start would have had. The Ray cluster srun starts runs with a token only its
owner reads; W&B continues the same run id; the traces of every step arrive exactly once across both starts.

Where SLURM is neither installed nor installable (not root), the same two launches run without it: SIGTERM to the
launcher, then the same command again. Two launches in all either way (seconds: the report).
"""

from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections import Counter
from pathlib import Path

import pytest

from harness import cpu_run
from local_ray_cluster import free_port
from recipes.constants import REPO_ROOT
from recipes.trainer.stop_request import EXIT_RESUMABLE

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(2400)]
OVERRIDES = ("trainer.total_training_steps=3", "trainer.save_freq=3", "trainer.test_freq=-1",
             "trainer.val_before_train=false", cpu_run.NO_LENGTH_FILTER)
ROLLOUT_N, PROMPTS_PER_STEP = 2, 2  # config/profile/cpu_smoke.yaml
TIMEOUT_S = 1500
REQUEUED = "[sbatch] launcher exit 75 (stopped, resumable): requeueing job"
REQUEUE_SETTLE_S = 3


def _job(env: dict, job_id: str) -> dict[str, str]:
    shown = subprocess.run(["scontrol", "show", "job", job_id], env=env, capture_output=True, text=True).stdout
    return dict(re.findall(r"(\w+)=(\S*)", shown))


def _through_slurm(env: dict, slurm_env: dict, work: Path) -> dict:
    """The run as a SLURM job stopped by USR1 and requeued: each start's part of the job's log, its status."""
    log = work / "job.out"
    # the CPU run's Ray: 2 logical GPUs (one per CPU rank) and the CPUs its placement asks for (cpu_smoke profile),
    # its own ports and temp dir (short: Ray's socket paths live there): other Ray instances are left alone
    ray_temp = tempfile.mkdtemp(prefix="rs", dir="/tmp")
    env = {**env, "N_GPUS_PER_NODE": "2", "RAY_CPUS_PER_NODE": "16", "RAY_START_TIMEOUT_S": "300",
           "RAY_PORT": str(free_port()), "RAY_HEAD_ARGS": f"--temp-dir={ray_temp} --include-dashboard=false",
           **slurm_env}
    submit = ["bash", "-c", 'source scripts/cpu_env.sh && exec sbatch --parsable --output="$0" '
              'scripts/run_gsm8k_grpo.sbatch "$@"', str(log), *OVERRIDES]
    job_id = subprocess.run(submit, cwd=REPO_ROOT, env=env, capture_output=True, text=True, check=True).stdout
    job_id = job_id.strip().split(";")[0]
    deadline = time.monotonic() + TIMEOUT_S
    start = time.monotonic()
    job: dict[str, str] = {}
    try:
        cpu_run.wait_for(log, r"\bstep:1 - ", None, TIMEOUT_S)
        subprocess.run(["scancel", "--signal=USR1", "--batch", job_id], env=env, check=True)
        signal_at = time.monotonic()
        cpu_run.wait_for(log, r"launcher exit 75", None, TIMEOUT_S)
        stopped_at = time.monotonic()
        while time.monotonic() < deadline:
            job = _job(env, job_id)
            if job.get("JobState") == "PENDING" and job.get("Restarts") == "1":
                # slurmd refuses a start whose credential is from the second the requeue revoked the last one's
                # ("Job credential revoked": the job fails), which SLURM's own requeue delay never meets
                time.sleep(REQUEUE_SETTLE_S)
                subprocess.run(["scontrol", "update", f"JobId={job_id}", "StartTime=now"], env=env, check=True)
                break
            time.sleep(1)
        while time.monotonic() < deadline:
            job = _job(env, job_id)
            if job.get("JobState") in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL"):
                break
            time.sleep(2)
    finally:
        if _job(env, job_id).get("JobState") not in ("COMPLETED", "FAILED", "CANCELLED"):
            subprocess.run(["scancel", job_id], env=env)
        shutil.rmtree(ray_temp, ignore_errors=True)
    text = log.read_text(errors="replace")
    first, found, second = text.partition(REQUEUED)
    print(f"\n[preempt] SLURM job {job_id}: {job.get('JobState')} after {time.monotonic() - start:.0f} s; USR1 to "
          f"the launcher's exit {stopped_at - signal_at:.1f} s; log {log}")
    return {"via": "slurm", "job": job, "text": text, "signal": "SIGUSR1",
            "stopped": {"status": EXIT_RESUMABLE if found else None, "log": first},
            "resumed": {"status": 0 if job.get("ExitCode") == "0:0" else job.get("ExitCode"), "log": second}}


def _through_the_launcher(env: dict, work: Path) -> dict:
    """The same run without SLURM: SIGTERM to the launcher, then the same command again."""
    runs = {}
    for name in ("stopped", "resumed"):
        log = work / f"{name}.log"
        start = time.monotonic()
        proc = cpu_run.start(env, log, *OVERRIDES)
        try:
            if name == "stopped":  # step 1's metrics line: step 2 is under way
                cpu_run.wait_for(log, r"\bstep:1 - ", proc, TIMEOUT_S)
                proc.send_signal(signal.SIGTERM)
            status = proc.wait(timeout=TIMEOUT_S)
        finally:
            cpu_run.kill_session(proc.pid)
        runs[name] = {"status": status, "log": log.read_text(errors="replace")}
        print(f"\n[preempt] {name}: exit {status}, {time.monotonic() - start:.0f} s")
    return {"via": "launcher", "signal": "SIGTERM", **runs}


@pytest.fixture(scope="module")
def preempted(request, tmp_path_factory, mini_gsm8k_dir):
    from harness.standins.weave_http_server import loopback_wandb

    try:
        slurm = request.getfixturevalue("local_slurm")
    except pytest.skip.Exception as why:
        print(f"\n[preempt] no SLURM here ({why}): the launcher is stopped directly")
        slurm = None
    work = tmp_path_factory.mktemp("preempt")
    model, data = cpu_run.prepare(work, mini_gsm8k_dir)
    output = work / "outputs"
    with loopback_wandb() as wandb:
        env = cpu_run.environment(model, data, output, TRACE="on", LOGGER="console,wandb", WANDB_MODE="offline",
                                  WANDB_DIR=str(work), **wandb.env)
        env.pop("WEAVE_PRINT_CALL_LINK", None)
        run = _through_slurm(env, slurm["env"], work) if slurm else _through_the_launcher(env, work)
        calls = wandb.storage.recorded_calls()
    return {**run, "output": output, "calls": calls, "work": work}


def test_a_stop_mid_step_saves_the_step_and_says_the_same_command_resumes(preempted):
    output, stopped, sig = preempted["output"], preempted["stopped"], preempted["signal"]
    assert stopped["status"] == EXIT_RESUMABLE, f"exit {stopped['status']}:\n{stopped['log'][-5000:]}"
    checkpoints = output / "checkpoints"
    saved = sorted(p.parent.name for p in checkpoints.glob("global_step_*/data.pt"))
    assert saved == ["global_step_2", "global_step_3"], "the stop's checkpoint of step 2, the end's of step 3: no other"
    assert (checkpoints / "global_step_2" / "actor").is_dir()
    assert cpu_run.steps(stopped["log"]) == [1, 2], "the stopped launch trains steps 1 and 2, then ends"
    assert _tracebacks(stopped["log"]) == [], "a stop prints no traceback (W&B's service closed before the exit)"
    lines = [line for line in stopped["log"].splitlines() if line.startswith(f"[launch] stopped ({sig})")]
    assert lines == [f"[launch] stopped ({sig}) after step 2: checkpoint of step 2 in {checkpoints}/global_step_2; "
                     f"run the same command to resume at step 3 (exit status {EXIT_RESUMABLE})"], lines
    before_the_exit = stopped["log"].split(lines[0])[0]
    assert "SIGTERM received" not in before_the_exit, "Ray's signal dump: main_ppo was killed, not stopped"


def test_the_same_command_resumes_at_the_next_step_and_trains_only_the_rest(preempted):
    resumed = preempted["resumed"]
    assert resumed["status"] == 0, f"exit {resumed['status']}:\n{resumed['log'][-5000:]}"
    assert "Resuming from" in resumed["log"] and "global_step_2" in resumed["log"]
    assert cpu_run.steps(resumed["log"]) == [3]
    assert _tracebacks(resumed["log"]) == [], "a run's end prints no traceback (W&B's service closed before the exit)"
    assert (preempted["output"] / "checkpoints" / "latest_checkpointed_iteration.txt").read_text().strip() == "3"


def test_slurm_requeues_the_job_once_and_it_ends_completed(preempted):
    if preempted["via"] != "slurm":
        pytest.skip("no SLURM here: the launcher was stopped directly")
    job, text, second = preempted["job"], preempted["text"], preempted["resumed"]["log"]
    assert job.get("JobState") == "COMPLETED" and job.get("ExitCode") == "0:0", (job, text[-5000:])
    assert job.get("Restarts") == "1", job
    assert "launcher exit 75" not in second, "one line for the launcher's exit, not two"
    assert "start 2:" in second and "[sbatch] launcher exit 0" in second


def test_the_slurm_jobs_ray_cluster_runs_with_a_token_in_no_file(preempted):
    if preempted["via"] != "slurm":
        pytest.skip("no SLURM here: the launcher was stopped directly")
    assert not (preempted["output"] / "ray_auth_token").exists()  # in the job's environment, no file others may swap
    assert "Token authentication is disabled" not in preempted["text"]


def test_every_row_is_trained_once_over_both_launches_in_one_data_order(preempted):
    prompts = {}
    for step in (1, 2, 3):
        rollouts = preempted["output"] / "rollouts" / f"{step}.jsonl"
        rows = [json.loads(line) for line in rollouts.read_text().splitlines()]
        assert len(rows) == PROMPTS_PER_STEP * ROLLOUT_N, step
        prompts[step] = {row["input"] for row in rows}
        assert len(prompts[step]) == PROMPTS_PER_STEP, step
    seen = Counter(p for step_prompts in prompts.values() for p in step_prompts)
    assert len(seen) == 3 * PROMPTS_PER_STEP and set(seen.values()) == {1}, "a row trained twice: data order lost"


def test_wandb_continues_one_run_across_the_stop(preempted):
    run_id = (preempted["output"] / "checkpoints" / "wandb_run_id").read_text().strip()
    runs = sorted(p.name for p in Path(preempted["work"], "wandb").glob("offline-run-*"))
    assert len(runs) == 2 and all(name.endswith(f"-{run_id}") for name in runs), (run_id, runs)


def test_each_steps_traces_arrive_exactly_once_across_the_stop(preempted):
    roots = [c for c in preempted["calls"] if c["parent_id"] is None and not c["attributes"].get("validate")]
    keys = Counter((c["attributes"]["step"], c["attributes"]["sample_index"], c["attributes"]["rollout_n"])
                   for c in roots)
    assert keys and set(keys.values()) == {1}, f"a trajectory traced twice: {keys}"
    assert {step for step, _, _ in keys} == {1, 2, 3}, sorted(keys)
    assert all(c["ended"] for c in roots)


def _tracebacks(log: str) -> list[str]:
    """The first lines of each traceback in the log."""
    lines = log.splitlines()
    return ["\n".join(lines[i:i + 4]) for i, line in enumerate(lines) if "Traceback (most recent call last)" in line]
