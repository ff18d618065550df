"""Multi-node submission against a real Ray cluster on this machine: two nodes on 127.0.0.1 (`ray start --head` and
`ray start --address`, each its own temp dir and ports), the job submitted by recipes/launch/ray_job.py
with the recipe's runtime env. The job's driver calls ray.init with verl's own PPO runtime env, as main_ppo does,
then a task and an actor, worker processes as on any other node, report what they see."""

import json
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from unittest import mock

import pytest

from recipes.constants import REPO_ROOT
from recipes.launch import ray_job

pytestmark = pytest.mark.integration

RAY = str(Path(sys.executable).with_name("ray"))
SECRET = "wandb-secret-" + "k" * 28
PROBE = """
import json, os, ray
from verl.trainer.constants_ppo import get_ppo_ray_runtime_env
ray.init(runtime_env=get_ppo_ray_runtime_env())  # what verl's main_ppo passes (its env vars beside the job's)
def seen():
    import tools
    return {"key": os.environ.get("WANDB_API_KEY"), "entity": os.environ.get("WANDB_ENTITY"),
            "base_url": os.environ.get("WANDB_BASE_URL"), "cwd": os.getcwd(), "tools": tools.__file__}
@ray.remote
def task():
    return seen()
@ray.remote
class Actor:
    def probe(self):
        return seen()
print("PROBE " + json.dumps({"task": ray.get(task.remote()), "actor": ray.get(Actor.remote().probe.remote())}))
"""


@pytest.fixture(scope="module")
def ray_head(ray_cluster):
    """The dashboard of the two-node cluster on this machine (tests/conftest.py: its own temp dirs and ports, so no
    other Ray user of the machine can attach to it), with its token auth in this process's environment."""
    from testkit.ray_auth import cluster_auth

    with cluster_auth(ray_cluster["env"]):
        yield ray_cluster["dashboard"]


def wait_for(client, job_id: str, timeout: float = 180):
    from ray.job_submission import JobStatus

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = client.get_job_status(job_id)
        if status in (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.STOPPED):
            return status
        time.sleep(1)
    client.stop_job(job_id)
    pytest.fail(f"job {job_id} did not finish in {timeout} s: {client.get_job_logs(job_id)[-2000:]}")


def submit_probe(address: str, environ: dict) -> tuple[dict, str, str]:
    from ray.job_submission import JobStatus

    client = ray_job.connect(address)
    before = set(Path(tempfile.gettempdir()).glob("gsm8k-recipe-job-*"))
    job_id = ray_job.submit(client, None, environ, command=f"{shlex.quote(sys.executable)} -c {shlex.quote(PROBE)}")
    assert set(Path(tempfile.gettempdir()).glob("gsm8k-recipe-job-*")) == before  # the local secrets copy is gone
    status = wait_for(client, job_id)
    logs = client.get_job_logs(job_id)
    assert status == JobStatus.SUCCEEDED, logs[-3000:]
    seen = json.loads(next(line for line in logs.splitlines() if line.startswith("PROBE "))[len("PROBE "):])
    return seen, job_id, logs


def test_workers_get_wandb_settings_and_the_repo_but_the_job_shows_no_secret(ray_head):
    environ = {"WANDB_API_KEY": SECRET, "WANDB_ENTITY": "my-team", "WANDB_BASE_URL": "https://wandb.example.com",
               "HOME": "/nonexistent", "PATH": os.environ["PATH"]}
    seen, job_id, _ = submit_probe(ray_head, environ)
    for where in ("task", "actor"):
        got = seen[where]
        assert (got["key"], got["entity"], got["base_url"]) == (SECRET, "my-team", "https://wandb.example.com"), where
        cwd = Path(got["cwd"])
        assert "_ray_pkg_" in cwd.name and (cwd / "config" / "gsm8k_multiturn_grpo.yaml").is_file()
        assert Path(got["tools"]).parent == cwd / "tools"  # the uploaded repo's tools, not an installed package
    cli_env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    if (Path.home() / ".ray" / "auth_token").is_file():  # the cluster then wants it, and Ray's CLI sends it only so
        cli_env["RAY_AUTH_MODE"] = "token"
    listing = subprocess.run([RAY, "job", "list", "--address", ray_head], capture_output=True, text=True, timeout=60,
                             env=cli_env)
    assert job_id in listing.stdout + listing.stderr and "my-team" in listing.stdout + listing.stderr
    assert SECRET not in listing.stdout + listing.stderr


def test_a_key_from_wandb_login_reaches_the_workers_too(ray_head, tmp_path):
    (tmp_path / ".netrc").write_text(f"machine api.wandb.ai\n  login user\n  password {SECRET}\n")
    seen, _, _ = submit_probe(ray_head, {"HOME": str(tmp_path), "PATH": os.environ["PATH"]})
    assert seen["actor"]["key"] == SECRET


def test_the_real_entrypoint_is_the_launcher_with_what_was_resolved_and_no_secret():
    overrides = ["profile=multinode", "data.train_files=/data/gsm8k/train.parquet", "trainer.logger=[console,wandb]"]
    payload = ray_job.job_payload({"EXPERIMENT_NAME": "a b", "PUBLISH_EVALS": "1"}, overrides)
    env = ray_job.build_runtime_env({"WANDB_API_KEY": SECRET, "WANDB_ENTITY": "e", "HOME": "/nonexistent"}, None)
    assert SECRET not in json.dumps(env) and env["env_vars"]["WANDB_ENTITY"] == "e"
    assert env["working_dir"] == str(REPO_ROOT) and ".venv" in env["excludes"]
    job = ray_job.read_job_payload({ray_job.LAUNCH_ENV: payload})
    assert job == {"knobs": {"EXPERIMENT_NAME": "a b", "PUBLISH_EVALS": "1"}, "overrides": overrides}
    assert ray_job.ENTRYPOINT == "python3 -m recipes.launch --job"  # no shell script runs again on the cluster
    for secret in ({"WANDB_API_KEY": SECRET}, {"HF_TOKEN": "x"}, {"WANDB_ENTITY": "e"}):
        with pytest.raises(ValueError):
            ray_job.job_payload(secret, overrides)


class HeadStartingUp:
    """Stands in for a Ray head whose job agent has not registered yet: the dashboard answers submissions with
    Ray's HTTP 500 (ray/dashboard/modules/job/job_head.py) `refusals` times, then takes the job."""

    def __init__(self, refusals: int, error: str = ray_job.NO_AGENT_YET + ", please try again later."):
        self.refusals, self.error, self.calls = refusals, error, 0

    def submit_job(self, **job):
        self.calls += 1
        if self.calls <= self.refusals:
            raise RuntimeError(f"Request failed with status code 500: {self.error}.")
        return job["submission_id"]


def test_a_head_that_just_started_gets_the_job_once_its_agent_is_up(monkeypatch, capsys):
    monkeypatch.setattr(ray_job.time, "sleep", lambda s: None)
    head = HeadStartingUp(refusals=3)
    assert ray_job.submit(head, None, {"HOME": "/nonexistent"}, submission_id="job-1") == "job-1"
    assert head.calls == 4 and capsys.readouterr().err.count("job agent is not up yet") == 1


def test_other_submission_errors_and_an_agent_that_never_comes_are_not_retried_forever(monkeypatch):
    monkeypatch.setattr(ray_job.time, "sleep", lambda s: None)
    refused = HeadStartingUp(refusals=1, error="runtime_env is invalid")
    with pytest.raises(RuntimeError, match="runtime_env is invalid"):
        ray_job.submit(refused, None, {"HOME": "/nonexistent"}, submission_id="job-2")
    assert refused.calls == 1
    never = HeadStartingUp(refusals=10**6)
    with pytest.raises(RuntimeError, match=ray_job.NO_AGENT_YET):
        ray_job._submit_when_an_agent_is_up(never, wait_s=0, submission_id="job-3")
    assert never.calls == 1


def test_a_stall_report_reads_every_nodes_processes_where_they_run(ray_cluster, tmp_path):
    """The stall report on a cluster (recipes/watchdog/cluster.py): a task pinned to each node samples that node's
    Ray workers with py-spy, so the report has stacks from every node and finds the culprit on whichever it is. The
    run (tests/testkit/stuck_on_ray.py): a driver, standing for main_ppo, with an actor on each node; the first is
    held in the run's own code, the second is stopped here, from outside."""
    import psutil

    from recipes.watchdog.cluster import gather
    from recipes.watchdog.culprit import suspects

    ready = tmp_path / "ready.json"
    env = {**os.environ, **ray_cluster["env"], "RAY_USAGE_STATS_ENABLED": "0"}
    driver = subprocess.Popen([sys.executable, "-m", "testkit.stuck_on_ray", ray_cluster["gcs"], str(ready)], env=env,
                              start_new_session=True)
    try:
        deadline = time.monotonic() + 180
        while not ready.exists():
            assert driver.poll() is None and time.monotonic() < deadline, "the stuck run did not start"
            time.sleep(0.2)
        held, idle = json.loads(ready.read_text())
        os.kill(idle["pid"], signal.SIGSTOP)
        while psutil.Process(idle["pid"]).status() != psutil.STATUS_STOPPED:
            time.sleep(0.01)
        with mock.patch.dict(os.environ, ray_cluster["env"]):  # what the launcher has to join the cluster
            nodes, errors = gather(driver.pid, window_s=2.0, samples=3, cluster_address=ray_cluster["gcs"])
    finally:
        os.killpg(driver.pid, signal.SIGKILL)
        driver.wait()
    assert not errors, errors
    labels = [n["label"] for n in nodes]
    assert labels[0].endswith("(the launcher's node: main_ppo's processes)")
    for actor in (held, idle):  # each actor sampled on its own node, by that node's task
        node = next(n for n in nodes[1:] if n["label"].endswith(f"({actor['node'][:8]})"))
        assert actor["pid"] in {p["pid"] for p in node["processes"]}, labels
    ranked = suspects(nodes)
    assert (ranked[0].pid, ranked[0].rank) == (idle["pid"], 1), [s.where() for s in ranked]
    assert ranked[0].node.endswith(f"({idle['node'][:8]})")
    assert (ranked[1].pid, ranked[1].stack[0][0]) == (held["pid"], "hold_the_loop"), [s.where() for s in ranked]
    assert ranked[1].node.endswith(f"({held['node'][:8]})")
