"""Stop = save, resume = the same command: the real launcher and verl's main_ppo on the CPU, through
scripts/run_gsm8k_grpo.sbatch on a real SLURM of two nodes (the `slurm_nodes` fixture: slurmctld and a slurmd on each
of node0 and node1, each node its own network, UTS and mount namespace, its own address on a bridge).

One CPU run of 2 steps with `save_freq` 2 (no periodic checkpoint before the end), traces on to a W&B stand-in on the
bridge, W&B offline, one rank, one rollout replica and one agent-loop worker per node. The batch script starts the Ray
head on node0 at its eth0 address (RAY_HEAD_INTERFACE; node0's first interface reaches nothing, as on a multi-NIC
head), then, once the head answers, the Ray worker on node1 (with Ray's GCS retries cut to a few: a worker started
before the head answers would give up), token auth on both. While step 1 trains, a job of the `urgent` partition
preempts it: SLURM sends SIGTERM to every step of the job but the batch script's (a grace time, no
`send_user_signal`), Ray keeps running on both nodes (node1's in its step, node0's in the batch script's), a watching
step on node0 passes the SIGTERM to the batch script, which forwards it to the launcher; the time limit's USR1 that
comes meanwhile is only said. The step is saved, the launcher
exits 75 with its one line and no Ray signal dump, the script stops Ray and requeues the job; the preemptor runs; SLURM
starts the job again on the same two nodes (the test skips SLURM's requeue delay, `scontrol update StartTime=now`) and
the same command resumes at step 2 and trains only it, with the data order the first start would have had. W&B
continues the same run id; the traces of every step arrive exactly once across both starts, from both nodes' relays.
The resumed trainer's first weight sync to the rollout servers is the checkpointed weights (the CPU servers' checksums,
CPU_ROLLOUT_EVENTS): the CPU end-to-end run (tests/test_e2e_cpu.py) does not resume, this run does.
Two launches in all; the one-node checks (token, requeue, resume) are the same job's.

Where namespaces cannot be made, the same run goes through a one-node SLURM (USR1 to the batch script), and where SLURM
is neither installed nor installable (not root), the launcher is stopped directly (SIGTERM): the two-node checks skip
with the reason. The batch script's own refusals and early stops, without training: tests/test_slurm_batch.py.
"""

from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import pytest

from harness import cpu_run
from harness.cpu_backend.server import EVENTS_ENV, loaded_weights
from local_ray_cluster import free_port
from recipes.constants import REPO_ROOT
from recipes.trainer.stop_request import EXIT_RESUMABLE

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(2400)]
OVERRIDES = ("trainer.total_training_steps=2", "trainer.save_freq=2", "trainer.test_freq=-1",
             "trainer.val_before_train=false", cpu_run.NO_LENGTH_FILTER)
ROLLOUT_N, PROMPTS_PER_STEP = 2, 2  # config/profile/cpu_smoke.yaml
TIMEOUT_S = 1500
REQUEUED = "[sbatch] launcher exit 75 (stopped, resumable): requeueing job"
REQUEUE_SETTLE_S = 3
GCS_TRIES = "3"  # a joining node's GCS tries, 20 by default: a worker that starts before the head answers fails
METRICS_PORTS = {44217: "the autoscaler monitor's", 44227: "the dashboard's"}  # Ray binds them to every interface
EVENTS_FILE = "rollout_events.jsonl"  # the CPU rollout servers' own record (CPU_ROLLOUT_EVENTS), both starts
# in a server's record, not in the forwarded log: step 1's rollouts are under way (a call written in a first turn)
STEP_ONE_UNDER_WAY = r'"event": "steered_tool_call"'
TRACE_LINE = re.compile(r"^\[traces\] trace relay on (\S+): (\d+) trace records sent", re.M)


def _job(env: dict, job_id: str) -> dict[str, str]:
    shown = subprocess.run(["scontrol", "show", "job", job_id], env=env, capture_output=True, text=True).stdout
    return dict(re.findall(r"(\w+)=(\S*)", shown))


def _wait_in_log(log: Path, pattern: str, env: dict, job_id: str) -> None:
    """Until the job's log has `pattern`; fails at once when the job ends first."""
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline:
        if log.exists() and re.search(pattern, log.read_text(errors="replace")):
            return
        if _job(env, job_id).get("JobState") in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL"):
            raise AssertionError(f"job {job_id} ended before '{pattern}':\n{cpu_run.tail(log)}")
        time.sleep(1)
    raise AssertionError(f"no '{pattern}' within {TIMEOUT_S} s:\n{cpu_run.tail(log)}")


def _metrics_endpoints(slurm: dict) -> dict[str, list[int]]:
    """For each node: the TCP ports listening in its namespace that answer an HTTP GET /metrics with Prometheus text
    (asked from inside the node, at its bridge address)."""
    from testkit import namespaced_nodes

    # Ray's listeners only (srun's and slurmd's own ports would take a stray request as a broken message)
    probe = ("import re, socket, subprocess, sys\n"
             "ports = set()\n"
             "for line in subprocess.run(['ss', '-ltnpH'], capture_output=True, text=True).stdout.splitlines():\n"
             "    names = re.findall(r'\\(\"([^\"]+)\",pid=', line)\n"
             "    if any(n.startswith(('ray', 'gcs_server', 'python')) for n in names):\n"
             "        ports.add(int(re.search(r':(\\d+)\\s', line).group(1)))\n"
             "found = []\n"
             "for port in sorted(ports):\n"
             "    data = b''\n"
             "    try:\n"
             "        with socket.create_connection((sys.argv[1], port), timeout=3) as s:\n"
             "            s.settimeout(3); s.sendall(b'GET /metrics HTTP/1.0\\r\\n\\r\\n')\n"
             "            while len(data) < 65536 and (chunk := s.recv(65536)):\n"
             "                data += chunk\n"
             "    except OSError:\n"
             "        pass\n"
             "    if b'# TYPE' in data or b'# HELP' in data:\n"
             "        found.append(port)\n"
             "print(found)\n")
    python = sys.executable
    found = {}
    for name in slurm["names"]:
        address = slurm["net"]["nodes"][name]["address"]
        done = namespaced_nodes.run_in(slurm["net"], name, [python, "-c", probe, address])
        found[name] = json.loads(done.stdout.strip() or "null")
    return found


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _ray_processes_left(slurm: dict, settle_s: float = 30) -> dict[str, list[str]]:
    """For each node: the command lines of Ray's processes still in its namespace (after `settle_s` for the ones
    on their way out)."""
    from testkit import namespaced_nodes

    deadline = time.monotonic() + settle_s
    while True:
        left = {}
        for name in slurm["names"]:
            lines = [_cmdline(pid) for pid in namespaced_nodes.processes_in([slurm["net"]["nodes"][name]["netns"]])]
            left[name] = [c for c in lines if any(m in c for m in ("gcs_server", "raylet", "ray start", "ray::"))]
        if not any(left.values()) or time.monotonic() > deadline:
            return left
        time.sleep(1)


def _through_slurm(env: dict, slurm: dict, work: Path) -> dict:
    """The run as a SLURM job stopped mid-step and requeued: each start's part of the job's log, its status."""
    log = work / "job.out"
    nodes = len(slurm["names"])
    ray_temp = tempfile.mkdtemp(prefix="rs", dir="/tmp")
    if nodes > 1:  # a logical GPU and the CPUs its placement asks for on each node; each node its own /tmp/ray
        env = {**env, "N_GPUS_PER_NODE": "1", "RAY_CPUS_PER_NODE": "8", "RAY_HEAD_INTERFACE": "eth0",
               "RAY_HEAD_ARGS": "--include-dashboard=false", "RAY_NUM_REDIS_GET_RETRIES": GCS_TRIES}
    else:  # the CPU run's Ray: 2 logical GPUs (one per CPU rank), its own ports and (short) temp dir on this machine
        env = {**env, "N_GPUS_PER_NODE": "2", "RAY_CPUS_PER_NODE": "16", "RAY_PORT": str(free_port()),
               "RAY_HEAD_ARGS": f"--temp-dir={ray_temp} --include-dashboard=false"}
    env = {**env, "RAY_START_TIMEOUT_S": "300", **slurm["env"]}
    submit = ["bash", "-c", 'source scripts/cpu_env.sh && exec sbatch --parsable --nodes="$1" --output="$0" '
              'scripts/run_gsm8k_grpo.sbatch "${@:2}"', str(log), str(nodes), *OVERRIDES]
    job_id = subprocess.run(submit, cwd=REPO_ROOT, env=env, capture_output=True, text=True, check=True).stdout
    job_id = job_id.strip().split(";")[0]
    deadline = time.monotonic() + TIMEOUT_S
    start = time.monotonic()
    job: dict[str, str] = {}
    urgent: dict[str, str] = {}
    metrics: dict = {}
    left: dict = {}
    try:
        if nodes > 1:  # Ray's listeners once every node has joined (the launcher starts meanwhile)
            _wait_in_log(log, r"\[ray_nodes\] 2 of 2 Ray node\(s\) alive", env, job_id)
            metrics = _metrics_endpoints(slurm)
        _wait_in_log(work / EVENTS_FILE, STEP_ONE_UNDER_WAY, env, job_id)
        if nodes > 1:
            # a job of the urgent partition wants a node: ours is preempted (SIGTERM to its steps, a grace time)
            urgent_id = subprocess.run(["sbatch", "--parsable", f"--partition={slurm['urgent']}", "--nodes=1",
                                        "--exclusive", f"--output={work / 'urgent.out'}", "--wrap", "true"],
                                       env=env, capture_output=True, text=True, check=True).stdout.strip()
            signal_at = time.monotonic()
            _wait_in_log(log, r"\[sbatch\] TERM received: forwarded to the launcher", env, job_id)
            subprocess.run(["scancel", "--signal=USR1", "--batch", job_id], env=env, check=True)  # a time limit's
        else:
            subprocess.run(["scancel", "--signal=USR1", "--batch", job_id], env=env, check=True)
            signal_at = time.monotonic()
        _wait_in_log(log, r"launcher exit 75", env, job_id)
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
        if nodes > 1:
            urgent = _job(env, urgent_id)
            left = _ray_processes_left(slurm)
    finally:
        if _job(env, job_id).get("JobState") not in ("COMPLETED", "FAILED", "CANCELLED"):
            subprocess.run(["scancel", job_id], env=env)
        shutil.rmtree(ray_temp, ignore_errors=True)
    text = log.read_text(errors="replace")
    first, found, second = text.partition(REQUEUED)
    stop = "the preemption" if nodes > 1 else "USR1"
    print(f"\n[preempt] SLURM job {job_id} on {nodes} node(s): {job.get('JobState')} after "
          f"{time.monotonic() - start:.0f} s; {stop} to the launcher's exit {stopped_at - signal_at:.1f} s; log {log}")
    return {"via": "slurm", "nodes": nodes, "job": job, "urgent": urgent, "metrics": metrics, "left": left,
            "text": text, "signal": "SIGUSR1",
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
            if name == "stopped":
                cpu_run.wait_for(work / EVENTS_FILE, STEP_ONE_UNDER_WAY, proc, TIMEOUT_S)
                proc.send_signal(signal.SIGTERM)
            status = proc.wait(timeout=TIMEOUT_S)
        finally:
            cpu_run.kill_session(proc.pid)
        runs[name] = {"status": status, "log": log.read_text(errors="replace")}
        print(f"\n[preempt] {name}: exit {status}, {time.monotonic() - start:.0f} s")
    return {"via": "launcher", "nodes": 1, "signal": "SIGTERM", **runs}


def _slurm(request) -> tuple[dict | None, str]:
    """The two-node SLURM, else the one-node one, else none; and why the two-node one is not there."""
    try:
        return request.getfixturevalue("slurm_nodes"), ""
    except pytest.skip.Exception as why:
        two = str(why)
    try:
        return request.getfixturevalue("local_slurm"), two
    except pytest.skip.Exception as why:
        print(f"\n[preempt] no SLURM here ({why}): the launcher is stopped directly")
        return None, f"{two}; {why}"


@pytest.fixture(scope="module")
def preempted(request, tmp_path_factory, mini_gsm8k_dir):
    from harness.standins.weave_http_server import loopback_wandb

    slurm, why = _slurm(request)
    work = tmp_path_factory.mktemp("preempt")
    model, data = cpu_run.prepare(work, mini_gsm8k_dir)
    output = work / "outputs"
    host = slurm.get("host_address", "127.0.0.1") if slurm else "127.0.0.1"
    with loopback_wandb(host=host) as wandb:  # where the nodes reach this machine
        env = cpu_run.environment(model, data, output, TRACE="on", LOGGER="console,wandb", WANDB_MODE="offline",
                                  WANDB_DIR=str(work), TRACE_SPOOL=str(work / "trace_spool"),
                                  **{EVENTS_ENV: str(work / EVENTS_FILE)}, **wandb.env)
        env.pop("WEAVE_PRINT_CALL_LINK", None)
        run = _through_slurm(env, slurm, work) if slurm else _through_the_launcher(env, work)
        calls = wandb.storage.recorded_calls()
    return {**run, "output": output, "calls": calls, "work": work, "slurm": slurm, "why_not_two": why}


def _two_nodes(preempted) -> dict:
    if preempted["nodes"] < 2:
        pytest.skip(f"no two-node SLURM here ({preempted['why_not_two']})")
    return preempted


def test_a_stop_mid_step_saves_the_step_and_says_the_same_command_resumes(preempted):
    output, stopped, sig = preempted["output"], preempted["stopped"], preempted["signal"]
    assert stopped["status"] == EXIT_RESUMABLE, f"exit {stopped['status']}:\n{stopped['log'][-5000:]}"
    checkpoints = output / "checkpoints"
    saved = sorted(p.parent.name for p in checkpoints.glob("global_step_*/data.pt"))
    assert saved == ["global_step_1", "global_step_2"], "the stop's checkpoint of step 1, the end's of step 2: no other"
    assert (checkpoints / "global_step_1" / "actor").is_dir()
    assert cpu_run.steps(stopped["log"]) == [1], "the stopped launch trains step 1, then ends"
    assert "Training from scratch" in stopped["log"]
    assert _tracebacks(stopped["log"]) == [], "a stop prints no traceback (W&B's service closed before the exit)"
    lines = [line for line in stopped["log"].splitlines() if line.startswith(f"[launch] stopped ({sig})")]
    assert lines == [f"[launch] stopped ({sig}) after step 1: checkpoint of step 1 in {checkpoints}/global_step_1; "
                     f"run the same command to resume at step 2 (exit status {EXIT_RESUMABLE})"], lines
    before_the_exit = stopped["log"].split(lines[0])[0]
    assert "SIGTERM received" not in before_the_exit, "Ray's signal dump: main_ppo was killed, not stopped"
    assert "stopping main_ppo at once" not in stopped["log"], "a second signal turned the save into a kill"


def test_the_same_command_resumes_at_the_next_step_and_trains_only_the_rest(preempted):
    resumed = preempted["resumed"]
    assert resumed["status"] == 0, f"exit {resumed['status']}:\n{resumed['log'][-5000:]}"
    assert "Resuming from" in resumed["log"] and "global_step_1" in resumed["log"]
    assert cpu_run.steps(resumed["log"]) == [2]
    assert _tracebacks(resumed["log"]) == [], "a run's end prints no traceback (W&B's service closed before the exit)"
    assert (preempted["output"] / "checkpoints" / "latest_checkpointed_iteration.txt").read_text().strip() == "2"
    # hydra's run folder (main_ppo's log, composed config) under OUTPUT_DIR/hydra: one per start, none in the repo
    configs = sorted((preempted["output"] / "hydra").glob("*/.hydra/config.yaml"))
    assert len(configs) == 2 and all((c.parent.parent / "main_ppo.log").exists() for c in configs), configs


def test_the_resumed_trainer_syncs_the_weights_the_stopped_one_saved(preempted):
    """Each rollout server appends a checksum of every weight version it loads (CPU_ROLLOUT_EVENTS, both starts into
    one file): the stopped start loads versions 0 and 1, the resumed one 1 (from the step-1 checkpoint), then 2."""
    events = [json.loads(line) for line in (preempted["work"] / EVENTS_FILE).read_text().splitlines()]
    loads = [e for e in events if e["event"] == "weights"]
    replicas, versions = len({e["replica"] for e in loads}), Counter(e["version"] for e in loads)
    assert replicas == 2 and versions == {0: 2, 1: 4, 2: 2}, (replicas, versions)
    by_version = loaded_weights(events)
    # version 1: both replicas of both starts, so the resumed start synced what the stopped one saved
    assert all(len(seen) == 1 for seen in by_version.values()), f"replicas or starts disagree: {by_version}"
    assert len(set().union(*by_version.values())) == 3, f"a step left the weights as they were: {by_version}"


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


def test_both_starts_run_on_the_two_nodes_each_at_its_own_address(preempted):
    run = _two_nodes(preempted)
    net = run["slurm"]["net"]["nodes"]
    head, worker = net["node0"]["address"], net["node1"]["address"]
    for part in (run["stopped"]["log"], run["resumed"]["log"]):
        assert re.search(r"\[sbatch\] job \d+, start [12]: 2 node\(s\) \(node\[0-1\]\), head node0,", part), part[:3000]
        # node0's first address is on an interface that reaches nothing: the knob picked eth0's
        assert f"[ray_nodes] the Ray head's address: {head} (RAY_HEAD_INTERFACE=eth0)" in part
        # the worker started once the head answered, and joined at its first try (Ray's GCS retries cut to a few)
        answered = part.index("[ray_nodes] 1 of 1 Ray node(s) alive")
        started = part.index(f"[sbatch] the Ray head answers at {head}:6379: starting 1 worker node(s)")
        joined = part.index(worker, started)  # Ray's `Local node IP: <address>` line of the worker
        assert answered < started < joined and f"[ray_nodes] 2 of 2 Ray node(s) alive at {head}:6379" in part
        assert "Failed to get cluster ID from GCS server" not in part[started:joined]


def test_a_preemption_sigterms_every_step_and_ray_keeps_running_until_the_step_is_saved(preempted):
    run = _two_nodes(preempted)
    stopped = run["stopped"]["log"]
    assert run["urgent"].get("JobState") == "COMPLETED", run["urgent"]  # the preemptor got its node, then
    # the preemption's SIGTERM reached every step: node1's Ray step said it and kept Ray running, the watching step on
    # node0 passed it to the batch script; node0's Ray runs in the batch script's step, which the preemption spares
    assert re.search(r"^\[ray node node1\] SIGTERM .*: Ray goes on until the batch script stops it$", stopped, re.M), \
        stopped[-5000:]
    assert re.search(r"^\[stop watch node0\] SIGTERM .*: passed to the batch script$", stopped, re.M)
    assert "[ray node node0] SIGTERM" not in stopped
    # the TaskRunner (and W&B's service it starts, which no mask keeps from a SIGTERM) ran on the head's node
    assert re.search(r"\(_StoppableTaskRunner pid=\d+\)", stopped) and "_StoppableTaskRunner pid=" in stopped
    assert not re.search(r"\(_StoppableTaskRunner pid=\d+, ip=", stopped)
    said = [line for line in stopped.splitlines() if line.startswith("[sbatch] ") and "received" in line]
    assert said == ["[sbatch] TERM received: forwarded to the launcher (as USR1)",
                    "[sbatch] USR1 received: already stopping (TERM)"], said
    # the script stopped the head's Ray after the save (node1's srun gave up on its step at the SIGTERM: that node's
    # lines end there), and after the last start no Ray process is left on either node
    assert "[ray node node0] stopped by the batch script" in stopped
    assert run["left"] == {"node0": [], "node1": []}, run["left"]


def test_ray_serves_metrics_only_where_it_gives_no_choice(preempted):
    """RAY_METRICS=0: no node runs Ray's metrics exporter (every interface, unauthenticated); what is left is the
    head's two Prometheus servers Ray binds to every interface whatever it is told (docs/multi-node.md)."""
    run = _two_nodes(preempted)
    assert run["metrics"] == {"node0": sorted(METRICS_PORTS), "node1": []}, run["metrics"]


def test_every_row_is_trained_once_over_both_launches_in_one_data_order(preempted):
    prompts = {}
    for step in (1, 2):
        rollouts = preempted["output"] / "rollouts" / f"{step}.jsonl"
        rows = [json.loads(line) for line in rollouts.read_text().splitlines()]
        assert len(rows) == PROMPTS_PER_STEP * ROLLOUT_N, step
        prompts[step] = {row["input"] for row in rows}
        assert len(prompts[step]) == PROMPTS_PER_STEP, step
    seen = Counter(p for step_prompts in prompts.values() for p in step_prompts)
    assert len(seen) == 2 * PROMPTS_PER_STEP and set(seen.values()) == {1}, "a row trained twice: data order lost"


def test_wandb_continues_one_run_across_the_stop(preempted):
    run_id = (preempted["output"] / "checkpoints" / "wandb_run_id").read_text().strip()
    runs = sorted(p.name for p in Path(preempted["work"], "wandb").glob("offline-run-*"))
    assert len(runs) == 2 and all(name.endswith(f"-{run_id}") for name in runs), (run_id, runs)


def test_each_steps_traces_arrive_exactly_once_across_the_stop(preempted):
    roots = [c for c in preempted["calls"] if c["parent_id"] is None and not c["attributes"].get("validate")]
    keys = Counter((c["attributes"]["step"], c["attributes"]["sample_index"], c["attributes"]["rollout_n"])
                   for c in roots)
    assert keys and set(keys.values()) == {1}, f"a trajectory traced twice: {keys}"
    assert {step for step, _, _ in keys} == {1, 2}, sorted(keys)
    assert all(c["ended"] for c in roots)
    if preempted["nodes"] > 1:  # each start: both nodes' relays sent their workers' traces
        for part in (preempted["stopped"]["log"], preempted["resumed"]["log"]):
            sent = {node: int(n) for node, n in TRACE_LINE.findall(part)}
            assert len(sent) == 2 and all(sent.values()), sent


def _tracebacks(log: str) -> list[str]:
    """The first lines of each traceback in the log."""
    lines = log.splitlines()
    return ["\n".join(lines[i:i + 4]) for i, line in enumerate(lines) if "Traceback (most recent call last)" in line]
