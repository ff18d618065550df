"""scripts/run_gsm8k_grpo.sbatch on a real SLURM (slurmctld and slurmd on this machine, the `local_slurm` fixture):
the CPU run (3 steps, `save_freq` 3) through the batch script, a Ray head started by srun with token auth, the
launcher on it. While step 2 trains, the batch shell gets USR1 (`scancel --signal=USR1 --batch`, what
`#SBATCH --signal=B:USR1@<s>` sends before a time limit): the step is saved, the launcher exits 75, the script
requeues the job; SLURM starts it again (the test skips SLURM's requeue delay, `scontrol update StartTime=now`)
and the same command resumes at step 3. Every step is trained once; the job ends COMPLETED. Two launches in all.
"""

from __future__ import annotations

import re
import shutil
import stat
import subprocess
import tempfile
import time

import pytest

from recipes.constants import REPO_ROOT
from recipes.harness import cpu_run
from recipes.harness.local_ray_cluster import free_port

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(2400)]
OVERRIDES = ("trainer.total_training_steps=3", "trainer.save_freq=3", "trainer.test_freq=-1",
             "trainer.val_before_train=false")
JOB_TIMEOUT_S = 1500


def _job(env: dict, job_id: str) -> dict[str, str]:
    shown = subprocess.run(["scontrol", "show", "job", job_id], env=env, capture_output=True, text=True).stdout
    return dict(re.findall(r"(\w+)=(\S*)", shown))


@pytest.fixture(scope="module")
def requeued(local_slurm, tmp_path_factory, mini_gsm8k_dir):
    work = tmp_path_factory.mktemp("slurm_preempt")
    model, data = cpu_run.prepare(work, mini_gsm8k_dir)
    output, log = work / "outputs", work / "job.out"
    # the CPU run's Ray: 2 logical GPUs (one per CPU rank) and the CPUs its placement asks for (cpu_smoke profile)
    # its own ports and temp dir (short: Ray's socket paths live there): other Ray instances are left alone
    ray_temp = tempfile.mkdtemp(prefix="rs", dir="/tmp")
    env = cpu_run.environment(model, data, output, N_GPUS_PER_NODE="2", RAY_CPUS_PER_NODE="16",
                              RAY_START_TIMEOUT_S="300", RAY_PORT=str(free_port()),
                              RAY_HEAD_ARGS=f"--temp-dir={ray_temp} --include-dashboard=false",
                              **local_slurm["env"])
    submit = ["bash", "-c", 'source scripts/cpu_env.sh && exec sbatch --parsable --output="$0" '
              'scripts/run_gsm8k_grpo.sbatch "$@"', str(log), *OVERRIDES]
    job_id = subprocess.run(submit, cwd=REPO_ROOT, env=env, capture_output=True, text=True, check=True).stdout.strip()
    job_id = job_id.split(";")[0]
    deadline = time.monotonic() + JOB_TIMEOUT_S
    timeline = {}
    try:
        cpu_run.wait_for(log, r"\bstep:1 - ", None, JOB_TIMEOUT_S)
        subprocess.run(["scancel", "--signal=USR1", "--batch", job_id], env=env, check=True)
        timeline["signal"] = time.monotonic()
        cpu_run.wait_for(log, r"launcher exit 75", None, JOB_TIMEOUT_S)
        timeline["launcher_exit"] = time.monotonic()
        while time.monotonic() < deadline:
            job = _job(env, job_id)
            if job.get("JobState") == "PENDING" and job.get("Restarts") == "1":
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
    print(f"\n[slurm] job {job_id}: {job.get('JobState')}, USR1 to the launcher's exit "
          f"{timeline['launcher_exit'] - timeline['signal']:.1f} s; log {log}")
    return job, text, output


def test_usr1_saves_the_step_and_the_requeued_job_trains_only_the_rest(requeued):
    job, text, output = requeued
    assert job.get("JobState") == "COMPLETED" and job.get("ExitCode") == "0:0", (job, text[-5000:])
    assert job.get("Restarts") == "1", job
    first, _, second = text.partition("[sbatch] launcher exit 75 (stopped, resumable): requeueing job")
    assert second, f"the job was not requeued by its script:\n{text[-5000:]}"
    assert cpu_run.steps(first) == [1, 2] and cpu_run.steps(second) == [3], (cpu_run.steps(first),
                                                                              cpu_run.steps(second))
    checkpoints = output / "checkpoints"
    line = (f"[launch] stopped (SIGUSR1) after step 2: checkpoint of step 2 in {checkpoints}/global_step_2; "
            "run the same command to resume at step 3 (exit status 75)")
    assert line in first, first[-4000:]
    assert "Resuming from" in second and "global_step_2" in second
    assert "start 2:" in second
    assert "[sbatch] launcher exit 0" in second
    assert (checkpoints / "latest_checkpointed_iteration.txt").read_text().strip() == "3"


def test_the_ray_cluster_runs_with_a_token_only_its_owner_reads(requeued):
    _, text, output = requeued
    token = output / "ray_auth_token"
    assert token.is_file() and stat.S_IMODE(token.stat().st_mode) == 0o600
    assert len(token.read_text().strip()) == 64
    assert "Token authentication is disabled" not in text
