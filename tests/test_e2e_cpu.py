"""verl's real `main_ppo`, end to end on the CPU: scripts/smoke_cpu.sh (the recipe's launcher, preflight and config
with PROFILE=cpu_smoke) trains two GRPO steps, validates, checkpoints and writes the reports; then the exported
checkpoint is evaluated. One launch (RESUME_CHECK=0: resuming from the checkpoint, and the weights the resumed trainer
syncs, are tests/test_preempt.py's, whose run stops and resumes anyway) in a subprocess; each test reads one kind of
evidence it left: logs with step metrics, the rollout servers' weight checksums, dumps, checkpoints, reports.

Select or skip it with `-m e2e` / `-m "not e2e"`. CPU_SMOKE_TIMEOUT (seconds) bounds the whole run;
CPU_SMOKE_REUSE=<work dir printed by an earlier run> re-reads that run's evidence instead of running; extra hydra
overrides for both launches can be given in CPU_SMOKE_OVERRIDES (space-separated), other knobs through the
environment (e.g. TRACE, LOGGER), as scripts/smoke_cpu.sh takes them.

The stand-ins (scripts/harness/cpu_backend) are the platform, the FSDP2 engine registration and the rollout server; the
server writes a calculator call in one of every two first turns of a prompt (a random model never does), and
everything else (agent loop, tools, reward, GRPO, FSDP2 update, checkpoint) is verl's and the recipe's.
Tracing is on, against a W&B stand-in on 127.0.0.1 (scripts/harness/standins/weave_http_server.py), with agent-loop
worker UNTRACED_WORKER's weave.init made to fail (tests/testkit/trace_fault.py): the other worker's traces must all
arrive, and the run must train on. The trace budget is set below one GRPO group a step (TRACE_GB_PER_DAY): clamped
to 1 group, the two workers trace in turn, each traced group arrives as one Weave thread whose roots carry verl's
advantages, and W&B receives the bytes the trace relay counted.
"""

from __future__ import annotations

import json
import math
import os
import re
import shlex
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from harness import cpu_run
from harness.cpu_backend.server import loaded_weights, weights_checksum
from harness.cpu_run import NO_LENGTH_FILTER
from recipes.constants import REPO_ROOT, SHARED_GSM8K_DIR
from recipes.tracing.volume import groups_on_worker
from testkit.commands import command
from testkit.trace_fault import FAULT_MODULE, UNTRACED_WORKER_ENV

SMOKE_TIMEOUT = int(os.environ.get("CPU_SMOKE_TIMEOUT", "900"))
REUSE_ENV = "CPU_SMOKE_REUSE"  # the work dir of an earlier run of this module: its evidence is read, nothing runs
TRACE_CALLS_FILE = "trace_calls.json"  # what the loopback W&B received, kept beside the run's logs
WRITE_BYTES_FILE = "wandb_write_bytes.json"  # the bytes of the trace writes it received, by route
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(SMOKE_TIMEOUT + 120)]

ROLLOUT_N, PROMPTS_PER_STEP, VAL_PROMPTS = 2, 2, 4  # config/profile/cpu_smoke.yaml and the smoke's data sizes
AGENT_WORKERS, UNTRACED_WORKER = 2, 0  # rollout.agent.num_workers; the worker whose weave.init fails
TRACING_WORKER = 1 - UNTRACED_WORKER
TRACE_GB_PER_DAY = "0.001"  # below one group a step: clamped to 1 GRPO group a step, the workers in turn
TRAIN_STEPS, VAL_STEPS = (1, 2), (0, 2)  # generate_sequences calls: training steps, validations
# what the smoke sets per run (or a user's shell might carry into it); anything else passes on (TRACE, LOGGER, ...)
_NOT_PASSED_ON = ("RAY_", "VERL_", "WORK_DIR", "OUTPUT_DIR", "PROFILE", "DATA_DIR", "MODEL_PATH", "GSM8K_DIR",
                  "RESUME_CHECK", "TRAIN_ROWS", "TEST_ROWS", "EXPERIMENT_NAME", "SUBMIT", "RECIPE_RESOLVED", "DRY_RUN",
                  "N_GPUS_PER_NODE", "NNODES", "TOOL_SET", "CPU_ROLLOUT_EVENTS", "WANDB_", "WF_", "WEAVE_",
                  "GSM8K_RECIPE_TRACE_", "TRACE_GB_PER_DAY", UNTRACED_WORKER_ENV)
_METRIC = re.compile(r"(\S+?):(?:np\.\w+\()?(-?(?:\d+\.?\d*(?:e[-+]?\d+)?|nan|inf))\)?(?: - |$)")
_STEP_LINE = re.compile(r"\bstep:(\d+) - (.*)$")
_CALL = re.compile(r'<tool_call>\n(\{.*?\})\n</tool_call>.*?<tool_response>\n(.*?)\n</tool_response>', re.DOTALL)


@dataclass
class Launch:
    log: str
    events: list[dict]
    metrics: dict[int, dict[str, float]] = field(default_factory=dict)

    def weights(self) -> dict[int, set[tuple[str, float]]]:
        """weights version -> {(sha256, sum)} over the replicas that loaded it."""
        return loaded_weights(self.events)


@dataclass
class Smoke:
    output: Path
    stdout: str
    wall_s: float
    train: Launch
    calls: list[dict]  # every trace call the loopback W&B received
    write_bytes: dict[str, int]  # the bytes of the trace writes it received, by route


def _step_metrics(log: str) -> dict[int, dict[str, float]]:
    steps: dict[int, dict[str, float]] = {}
    for line in log.splitlines():
        match = _STEP_LINE.search(line)
        if match:
            steps.setdefault(int(match.group(1)), {}).update(
                {k: float(v) for k, v in _METRIC.findall(match.group(2) + " - ")})
    return steps


def _launch(output: Path, name: str) -> Launch:
    log = (output / "logs" / f"{name}.log").read_text(errors="replace")
    events_file = output / "logs" / f"{name}.rollout_events.jsonl"
    events = [json.loads(line) for line in events_file.read_text().splitlines()] if events_file.exists() else []
    return Launch(log=log, events=events, metrics=_step_metrics(log))


@pytest.fixture(scope="module")
def smoke(tmp_path_factory, shared_gsm8k_dir_or_mini) -> Smoke:
    """The one smoke run every test reads, tracing on against a loopback W&B for both launches; agent-loop
    worker UNTRACED_WORKER's weave.init is made to fail (tests/testkit/trace_fault.py)."""
    from harness.standins.weave_http_server import loopback_wandb

    if os.environ.get(REUSE_ENV):  # re-read a finished run's evidence (while editing these tests)
        work = Path(os.environ[REUSE_ENV])
        return _smoke(work, (work / "stdout.log").read_text(), wall_s=float("nan"))

    work = tmp_path_factory.mktemp("cpu_smoke")
    env = {k: v for k, v in os.environ.items() if not k.startswith(_NOT_PASSED_ON)}
    env.update(PYTHON=sys.executable, WORK_DIR=str(work), GSM8K_DIR=str(shared_gsm8k_dir_or_mini), TRACE="on",
               RESUME_CHECK="0",
               TRACE_GB_PER_DAY=TRACE_GB_PER_DAY, WANDB_ERROR_REPORTING="false", VERL_USE_EXTERNAL_MODULES=FAULT_MODULE,
               **{UNTRACED_WORKER_ENV: str(UNTRACED_WORKER)})
    args = [NO_LENGTH_FILTER, *shlex.split(os.environ.get("CPU_SMOKE_OVERRIDES", ""))]
    with loopback_wandb() as wandb:
        env.update(wandb.env)
        env.pop("WEAVE_PRINT_CALL_LINK")  # unset, as in a user's shell: the workers must quiet weave themselves
        start = time.monotonic()
        proc = subprocess.Popen(["bash", str(REPO_ROOT / "scripts" / "smoke_cpu.sh"), *args], env=env, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
        try:
            stdout, _ = proc.communicate(timeout=SMOKE_TIMEOUT)
        except subprocess.TimeoutExpired:
            cpu_run.kill_session(proc.pid)
            stdout, _ = proc.communicate()
            pytest.fail(f"scripts/smoke_cpu.sh ran past {SMOKE_TIMEOUT} s (CPU_SMOKE_TIMEOUT); last output:\n"
                        f"{stdout[-4000:]}")
        finally:
            cpu_run.kill_session(proc.pid)
        wall_s = time.monotonic() - start
        # each worker flushed weave at the end of every generate_sequences: everything is here by now
        calls = wandb.storage.recorded_calls()
        write_bytes = dict(wandb.app.write_bytes)
    output = work / "outputs"
    (work / "stdout.log").write_text(stdout)
    (output / "logs").mkdir(parents=True, exist_ok=True)
    (output / "logs" / TRACE_CALLS_FILE).write_text(json.dumps(calls, default=str))
    (output / "logs" / WRITE_BYTES_FILE).write_text(json.dumps(write_bytes))
    assert proc.returncode == 0, f"scripts/smoke_cpu.sh failed ({proc.returncode}); last output:\n{stdout[-6000:]}"
    print(f"\n[cpu smoke] scripts/smoke_cpu.sh took {wall_s:.0f} s ({work})", file=sys.stderr)
    return _smoke(work, stdout, wall_s)


def _smoke(work: Path, stdout: str, wall_s: float) -> Smoke:
    output = work / "outputs"
    calls = json.loads((output / "logs" / TRACE_CALLS_FILE).read_text())
    write_bytes = json.loads((output / "logs" / WRITE_BYTES_FILE).read_text())
    return Smoke(output=output, stdout=stdout, wall_s=wall_s, train=_launch(output, "train"), calls=calls,
                 write_bytes=write_bytes)


@pytest.fixture(scope="module")
def shared_gsm8k_dir_or_mini(mini_gsm8k_dir) -> Path:
    return SHARED_GSM8K_DIR if (SHARED_GSM8K_DIR / "train.jsonl").is_file() else mini_gsm8k_dir


def test_two_grpo_steps_update_the_actor_with_nonzero_advantages_and_the_kl_loss(smoke):
    steps = smoke.train.metrics
    assert {1, 2} <= set(steps), f"no step metrics for steps 1 and 2 in logs/train.log: {sorted(steps)}"
    for step in (1, 2):
        m = steps[step]
        # the reward varies within GRPO groups (the tool-call bonus), so advantages and gradients are not zero
        assert m["critic/advantages/max"] > 0 > m["critic/advantages/min"], m
        assert m["actor/grad_norm"] > 0 and m["actor/pg_loss"] != 0, m
        assert "actor/kl_loss" in m and "timing_s/ref" in m  # the reference model ran: KL loss on
        assert m["critic/score/max"] > m["critic/score/min"], m
        # the rollout's log-probs are the actor's: the CPU server scores tokens with the same model
        assert m["training/rollout_probs_diff_max"] < 1e-3, m


def test_the_weights_the_rollout_receives_change_every_step_and_start_from_the_model_on_disk(smoke):
    from transformers import AutoModelForCausalLM

    weights = smoke.train.weights()
    assert sorted(weights) == [0, 1, 2], f"weight versions loaded by the rollout servers: {sorted(weights)}"
    for version, seen in weights.items():
        assert len(seen) == 1, f"the replicas disagree on the weights of step {version}: {seen}"
    (v0,), (v1,), (v2,) = weights[0], weights[1], weights[2]
    assert len({v0[0], v1[0], v2[0]}) == 3 and v0[1] != v1[1] != v2[1], (v0, v1, v2)
    model = AutoModelForCausalLM.from_pretrained(str(smoke.output.parent / "model"))
    assert weights_checksum(model)[2] == v0[0]  # the first sync carries the actor's initial weights
    replicas = {e["replica"] for e in smoke.train.events if e["event"] == "weights"}
    assert replicas == {0, 1}


def test_the_agent_loop_calls_the_recipes_calculator_and_the_reward_pays_for_it(smoke):
    steered = [e for e in smoke.train.events if e["event"] == "steered_tool_call"]
    assert {e["replica"] for e in steered} == {0, 1}, "both rollout replicas served first turns"
    records = [json.loads(line) for step in (1, 2) for line in (smoke.output / "rollouts" / f"{step}.jsonl").open()]
    assert len(records) == 2 * PROMPTS_PER_STEP * ROLLOUT_N
    calls = 0
    for record in records:
        made = _CALL.findall(record["output"])
        for call, response in made:  # the tool really ran: its answer is the sum the call asked for
            a, b = json.loads(call)["arguments"]["expression"].split(" + ")
            assert math.isclose(float(response), float(a) + float(b)), (call, response)
        calls += len(made)
        assert record["num_tool_calls"] == len(made) and record["score"] == pytest.approx(0.1 * bool(made))
    assert calls == len(records) // ROLLOUT_N  # one steered first turn per GRPO pair
    # two agent-loop workers each ran part of every batch (their outputs were concatenated)
    assert len(set(re.findall(r"\((?:Traced)?AgentLoopWorker pid=(\d+)\)", smoke.train.log))) >= AGENT_WORKERS


def test_rollout_and_validation_dumps_and_the_reports_are_written(smoke):
    for step in TRAIN_STEPS:
        assert len((smoke.output / "rollouts" / f"{step}.jsonl").read_text().splitlines()) == \
            PROMPTS_PER_STEP * ROLLOUT_N
    for step in VAL_STEPS:
        lines = (smoke.output / "validation" / f"{step}.jsonl").read_text().splitlines()
        assert len(lines) == VAL_PROMPTS and all("score" in json.loads(line) for line in lines)
    report = (smoke.output / "report" / "report.md").read_text()
    assert "## train rollouts: steps 1-2" in report and (smoke.output / "report" / "steps.png").stat().st_size > 0
    summary = json.loads((smoke.output / "validation" / "summary.json").read_text())
    assert summary["step"] == TRAIN_STEPS[-1] and summary["answers"] == VAL_PROMPTS
    assert re.search(r"^RESULT strict_acc=\S+ flexible_acc=\S+ tool_calls_per_answer=\S+$", smoke.stdout, re.M)


def test_the_last_step_is_checkpointed_and_the_run_started_from_scratch(smoke):
    checkpoints = smoke.output / "checkpoints"
    assert (checkpoints / "global_step_2" / "actor").is_dir()
    assert (checkpoints / "latest_checkpointed_iteration.txt").read_text().strip() == "2"
    assert "Training from scratch" in smoke.train.log


def test_every_trajectory_of_the_tracing_worker_arrives_with_its_reward_and_the_failing_worker_trains_untraced(smoke):
    # the failing worker: its real weave.init failed, the recipe's guard turned its tracing off
    log = smoke.train.log
    assert re.search(rf"\[cpu-smoke\] agent_loop_worker_{UNTRACED_WORKER}_\w+: weave pointed at closed port", log), \
        "the fault was not injected into the chosen agent-loop worker"
    assert len(re.findall(r"Weave tracing is OFF for this run: weave\.init\(", log)) == 1, \
        "exactly one agent-loop worker's weave.init should fail"
    # the tracing worker: verl hands each worker an equal slice of every generate_sequences batch, and under the
    # budget of 1 group a step the workers trace 1 prompt in turn (recipes.tracing.volume.groups_on_worker): the
    # tracing worker's turns are the steps it traces (all rollouts of its prompt); validation has n=1
    per_train = {step: groups_on_worker(TRACING_WORKER, AGENT_WORKERS, 1, step) * ROLLOUT_N for step in TRAIN_STEPS}
    per_val = {step: groups_on_worker(TRACING_WORKER, AGENT_WORKERS, 1, step) for step in VAL_STEPS}
    made = sum(per_train.values()) + sum(per_val.values())
    roots = [c for c in smoke.calls if c["parent_id"] is None]
    assert len(roots) == made, f"traced trajectories received {len(roots)}, made by the tracing worker {made}"
    keys = {(c["attributes"].get("validate", False), c["attributes"]["step"], c["attributes"]["sample_index"],
             c["attributes"]["rollout_n"]) for c in roots}
    assert len(keys) == made, "a trajectory arrived twice or without its step / sample / rollout attributes"
    received = Counter((validate, step) for validate, step, _, _ in keys)
    assert received == Counter({**{(False, s): n for s, n in per_train.items() if n},
                                **{(True, s): n for s, n in per_val.items() if n}}), received
    for root in roots:  # whole: ended, with the recipe's reward in the root's output, every turn below it
        assert root["ended"] and root["exception"] is None, root
        reward = (root["output"] or {}).get("reward")
        assert isinstance(reward, (int, float)) and not isinstance(reward, bool), root["output"]
    ids = {c["id"] for c in smoke.calls}
    assert all(c["ended"] and c["parent_id"] in ids for c in smoke.calls if c["parent_id"] is not None)
    assert any(c["op_name"] and "execute" in c["op_name"] for c in smoke.calls), "no traced tool execution"
    # the untraced worker's outputs were concatenated with the traced one's: every trajectory was trained on
    for step in TRAIN_STEPS:
        assert len((smoke.output / "rollouts" / f"{step}.jsonl").read_text().splitlines()) == \
            PROMPTS_PER_STEP * ROLLOUT_N


def test_each_trace_root_shows_the_score_the_trainer_used_for_that_trajectory(smoke):
    """The agent loop scored every trajectory once (verl's reward workers are not started: reward.num_workers=0,
    so an unscored trajectory would have ended the run) and the trace root carries that score: it equals the
    dump's score of the same trajectory (same step and prompt, same final turn)."""
    roots = [c for c in smoke.calls if c["parent_id"] is None]
    assert roots
    for root in roots:
        out, attrs = root["output"], root["attributes"]
        folder = "validation" if attrs.get("validate") else "rollouts"
        records = [json.loads(line) for line in (smoke.output / folder / f"{attrs['step']}.jsonl").open()]
        question = next(m["content"] for m in out["messages"] if m["role"] == "user")
        same = [r for r in records if question in r["input"] and r["num_tool_calls"] == out["num_tool_calls"]
                and r["output"].strip().endswith(out["final_answer"].strip())]
        assert same, f"no dump line of {folder}/{attrs['step']}.jsonl matches trace root {root['id']}"
        assert {r["score"] for r in same} == {out["reward"]}, (out["reward"], [r["score"] for r in same])


def test_the_budget_is_clamped_to_one_group_a_step_and_said_so(smoke):
    log = smoke.train.log
    assert f"[traces] TRACE_GB_PER_DAY={TRACE_GB_PER_DAY} is below one GRPO group a step" in log
    assert "tracing 1 group a step (clamped)" in log
    assert re.search(r"^\[traces\] weave, 1 GRPO group\(s\) a step \(1 prompt on 1 of the 2 agent-loop workers, "
                     r"in turn, all 2 rollouts, one Weave thread each\) = 2 traced trajectories; ~[\d.]+ MB a step",
                     log, re.M), log[-3000:]


def test_each_traced_group_is_one_thread_whose_roots_carry_verls_advantages(smoke):
    """Each traced training step: one thread of the group's ROLLOUT_N roots, each root's advantage what verl's
    compute_grpo_outcome_advantage gives for the group's rewards as the trainer dumped them (the dump lines of the
    same prompt; norm_adv_by_std_in_grpo as the recipe leaves it, on)."""
    import torch
    from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage

    roots = [c for c in smoke.calls if c["parent_id"] is None and not c["attributes"].get("validate")]
    threads: dict[str, list[dict]] = {}
    for root in roots:
        threads.setdefault(root["thread_id"], []).append(root)
    assert None not in threads, "a traced training rollout outside a thread"
    assert sorted(len(members) for members in threads.values()) == [ROLLOUT_N] * len(threads) and threads
    for thread_id, members in threads.items():
        step = members[0]["attributes"]["step"]
        prompt = members[0]["attributes"]["sample_index"]
        assert thread_id.startswith(f"gsm8k_cpu_smoke/train/step{step}/prompt{prompt}/"), thread_id
        question = next(m["content"] for m in members[0]["output"]["messages"] if m["role"] == "user")
        scores = [json.loads(line)["score"] for line in (smoke.output / "rollouts" / f"{step}.jsonl").open()
                  if question in json.loads(line)["input"]]
        assert len(scores) == ROLLOUT_N, (step, scores)
        advantages, _ = compute_grpo_outcome_advantage(torch.tensor(scores).unsqueeze(-1), torch.ones(ROLLOUT_N, 1),
                                                       ["group"] * ROLLOUT_N, norm_adv_by_std_in_grpo=True)
        verl = {score: float(a) for score, a in zip(scores, advantages[:, 0], strict=True)}
        for member in members:
            out = member["output"]
            assert list(out)[:5] == ["reward", "advantage", "group_mean", "group_std", "group_size"], list(out)[:6]
            assert out["advantage"] == pytest.approx(verl[out["reward"]], abs=1e-6), (thread_id, out, scores)
        # every call of the group's rollouts carries its thread
        traces = {m["trace_id"] for m in members}
        assert {c["thread_id"] for c in smoke.calls if c["trace_id"] in traces} == {thread_id}


def test_wandb_received_the_trace_bytes_the_relay_counted(smoke):
    """What the relay says it sent (its spool's count, OUTPUT_DIR/trace_relays.json) is what W&B
    (the stand-in) received in the trace writes' bodies, within 5%."""
    relays = json.loads((smoke.output / "trace_relays.json").read_text())["nodes"]
    sent = sum(node["sent_bytes"] for node in relays)
    received = sum(smoke.write_bytes.values())
    assert received and abs(sent - received) <= 0.05 * received, (sent, smoke.write_bytes)
    roots = [c for c in smoke.calls if c["parent_id"] is None]
    print(f"\n[cpu smoke] W&B received {received} trace bytes (calls: {smoke.write_bytes.get('calls/complete')}), "
          f"{received / len(roots):.0f} per traced trajectory; the relay counted {sent}", file=sys.stderr)


def test_the_console_says_once_where_the_traces_are_and_prints_no_link_per_call(smoke):
    lines = smoke.train.log.splitlines()
    links = [line for line in lines if "🍩" in line or "/r/call/" in line]
    assert not links, f"{len(links)} per-call weave links, e.g. {links[0]}"
    assert sum(line.startswith("[traces] Weave traces") for line in lines) == 1, smoke.train.log


def test_the_exported_final_checkpoint_scores_through_the_cpu_eval_path(smoke, tmp_path):
    """The user's path after training, on CPU: gsm8k-export-checkpoint, then `DEVICE=cpu
    scripts/eval_gsm8k.sh` (a validation-only launch) and its summary. The eval never steers: the random model
    writes no tool call itself, so a steered eval would show calls on about half its answers."""
    model = tmp_path / "hf"
    env = {k: v for k, v in os.environ.items() if not k.startswith(_NOT_PASSED_ON)}
    env.update(PYTHON=sys.executable, WANDB_ERROR_REPORTING="false", HF_HUB_OFFLINE="1")
    export = subprocess.run([*command("gsm8k-export-checkpoint"), str(smoke.output / "checkpoints"), "--target_dir",
                             str(model)],
                            env={**env, "PYTHONPATH": str(REPO_ROOT)}, capture_output=True, text=True, timeout=300)
    assert export.returncode == 0, export.stdout + export.stderr
    # named by the launch's own hydra config (the folder is only "outputs"), for the evaluation's name
    record = json.loads((model / "exported_from.json").read_text())
    assert (record["experiment"], record["step"]) == ("gsm8k_cpu_smoke", TRAIN_STEPS[-1]), record
    # one CPU rank, rollout replica and agent-loop worker (the profile has two): what is checked is the eval's path,
    # not its division
    env.update(DEVICE="cpu", MODEL_PATH=str(model), DATA_DIR=str(smoke.output.parent / "data"),
               OUTPUT_DIR=str(tmp_path / "eval"), N_GPUS_PER_NODE="1")
    proc = subprocess.run(["bash", str(REPO_ROOT / "scripts" / "eval_gsm8k.sh"), NO_LENGTH_FILTER,
                           "actor_rollout_ref.rollout.agent.num_workers=1"], env=env, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                          timeout=600, start_new_session=True)
    assert proc.returncode == 0, proc.stdout[-6000:]
    summary = json.loads((tmp_path / "eval" / "validation" / "summary.json").read_text())
    assert summary["answers"] == VAL_PROMPTS and summary["step"] == 0, summary
    assert summary["tool_call_rate"] == 0, f"the eval steered: {summary}"
    assert re.search(r"^RESULT strict_acc=\S+ flexible_acc=\S+ tool_calls_per_answer=\S+$", proc.stdout, re.M)


def test_hydra_keeps_each_launchs_config_under_the_run_not_in_the_repo(smoke):
    """hydra's run folder (main_ppo's log and composed config) is <OUTPUT_DIR>/hydra/<time>/, one per launch (a
    resumed launch's beside it: tests/test_preempt.py); by default it was ./outputs/<date>/<time>/ in the repo,
    whatever OUTPUT_DIR said."""
    import yaml

    configs = sorted((smoke.output / "hydra").glob("*/.hydra/config.yaml"))
    assert len(configs) == 1, configs
    trainer = yaml.safe_load(configs[0].read_text())["trainer"]
    assert (trainer["experiment_name"], trainer["total_training_steps"]) == ("gsm8k_cpu_smoke", TRAIN_STEPS[-1])
    assert (configs[0].parent.parent / "main_ppo.log").exists()


def test_a_clean_run_ends_without_a_traceback_and_without_the_lines_the_launcher_silences(smoke):
    """Nothing after a launch's last step reads as a crash: with DataLoader worker processes (verl's default 8), Ray
    SIGKILLs them as the TaskRunner exits and torch's SIGCHLD handler raises "DataLoader worker (pid ...) is killed
    by signal" inside an atexit callback, although the run succeeded; the recipe loads prompts in-process
    (data.dataloader_num_workers: 0). No process prints what recipes/launch/console.py filters (verl's unused
    engines) or Ray's notice that it picked token authentication."""
    lines = smoke.train.log.splitlines()
    last = max(i for i, line in enumerate(lines) if _STEP_LINE.search(line))
    after = "\n".join(lines[last + 1:])
    assert not re.search(r"Traceback|Exception ignored|Error\b", after), f"logs/train.log after its last step:\n" \
        f"{after[-4000:]}"
    for line in ("engine is not available", "Token authentication is enabled"):
        assert line not in smoke.train.log, f"logs/train.log prints {line!r}"


def test_the_smoke_ends_with_its_source_report_pass_rule_and_result_line(smoke):
    lines = smoke.stdout.strip().splitlines()
    assert re.fullmatch(r"RESULT strict_acc=\S+ flexible_acc=\S+ tool_calls_per_answer=\S+", lines[-1]), lines[-5:]
    said = {line.split(":", 1)[0]: line for line in lines if line.startswith("[smoke_cpu] ")}
    assert said["[smoke_cpu] GSM8K"].startswith("[smoke_cpu] GSM8K: ") and "report.md" in said["[smoke_cpu] report"]
    assert f"{smoke.output}/report/report.md" in said["[smoke_cpu] report"]
    assert said["[smoke_cpu] passed"].startswith("[smoke_cpu] passed: steps 1-2 trained (RESUME_CHECK=0: no resume). "
                                                 "A pass is exit status 0")
    assert "[smoke_cpu] python: " in smoke.stdout  # which interpreter, and why


def test_the_progress_watchdog_follows_both_launches_and_raises_no_alarm(smoke):
    """On by default: it read main_ppo's output (its progress lines included) and never found the run stalled."""
    log = smoke.train.log
    assert "[stall] progress watchdog on: a report and STALL_ACTION=stop after 60 min" in log
    end = re.search(r"\[stall\] watchdog: no stall; last progress: ([^;]+); (\d+) lines", log)
    assert end and end.group(1) == "the final validation" and int(end.group(2)) > 100, log[-3000:]
    assert "[stall] likely culprit" not in log
    assert not (smoke.output / "stall").exists()
