"""No trace lost, across processes: the recipe's agent-loop worker, created by the manager class the recipe
config names, runs as a real Ray async actor with the real weave client and verl's own generate_sequences;
W&B is a loopback stand-in (harness.standins.weave_http_server) that can go down and come back; the trace
relay and the upload command run as the launcher and a user would run them (real processes). Figures: calls made vs
calls received, complete (start and end)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from types import SimpleNamespace

import numpy as np
import pytest
from ray import cloudpickle

from data_prep.gsm8k_rows import SourceRecord, build_row
from harness import agent_loop_inprocess as harness
from harness.qwen_tokenizer import build_tiny_qwen2_model_dir, default_cache_dir, load_qwen25_tokenizer
from harness.standins.scripted_llm import ScriptedLLM, tool_call
from harness.standins.weave_http_server import API_KEY, loopback_wandb
from recipes.gsm8k.tool_sets import get_tool_set
from testkit.commands import command
from testkit.paths import recipe_pythonpath
from testkit.relay_process import RelayProcess
from tools.calculator import NAME as CALCULATOR

pytestmark = [pytest.mark.integration, pytest.mark.timeout(400)]

PROJECT = "trace-delivery"
QUESTIONS = [  # (question, answer, assistant turns): calls per trajectory = root + its chat view + 2 per turn
    # + 1 per tool call
    ("Tom reads 12 pages a day for 6 days. How many pages?", "72",
     [tool_call(CALCULATOR, expression="12*6"), "#### 72"]),
    ("A rope of 7 m is cut in 2 equal pieces. How long is each?", "3.5", ["#### 3.5"]),
    ("Half of 48 muffins are sold. How many are left?", "24", [tool_call(CALCULATOR, expression="48/2"), "#### 24"]),
]
ROLLOUT_N = 2
CALLS_PER_STEP = ROLLOUT_N * sum(2 + 2 * len(turns) + sum("<tool_call>" in t for t in turns) for *_, turns in QUESTIONS)


class ScriptedServer:
    """Stands in for verl's LLMServerClient (the LLM behind the agent loop). A plain class: hydra, which builds
    the agent loop from config/agent_loop.yaml, would turn a dataclass such as ScriptedLLM into a config node."""

    def __init__(self, llm: ScriptedLLM) -> None:
        self.llm = llm
        self.tokenizer = llm.tokenizer

    async def generate(self, **kwargs):
        return await self.llm.generate(**kwargs)


cloudpickle.register_pickle_by_value(sys.modules[__name__])  # Ray workers cannot import this test module


@pytest.fixture(scope="module")
def run(repo_root, tmp_path_factory):
    """Three agent-loop workers started at once (their start-up dominates): one tracing straight to a W&B
    stand-in, one through a relay to a second stand-in, one through a relay with no W&B at all."""
    import ray
    from verl.protocol import DataProto
    from verl.utils.import_utils import load_class_from_fqn

    model_dir = build_tiny_qwen2_model_dir(default_cache_dir() / "tiny-qwen2")
    config = harness.compose_trainer_config("calculator", (
        f"trainer.project_name={PROJECT}",
        "actor_rollout_ref.rollout.trace.max_samples_per_step_per_worker=null",  # trace every sample
    ), model_path=str(model_dir))
    scripts = {q: turns for q, _, turns in QUESTIONS}
    llm = ScriptedServer(ScriptedLLM(load_qwen25_tokenizer(),
                                     lambda prompt: next(t for q, t in scripts.items() if q in prompt)))
    rows = [build_row(SourceRecord(q, f"#### {a}", "test", i), "train", get_tool_set("calculator"))
            for i, (q, a, _) in enumerate(QUESTIONS)]
    samples = [harness.row_kwargs(row) for row in rows for _ in range(ROLLOUT_N)]  # as verl repeats rows n times
    non_tensor = {key: np.array([s[key] for s in samples], dtype=object) for key in samples[0]}
    # the class the trainer loads from the recipe config (ray_trainer: agent_loop_manager_class)
    manager_class = load_class_from_fqn(config.actor_rollout_ref.rollout.agent.agent_loop_manager_class)
    ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": recipe_pythonpath(repo_root)}})

    def start_worker(env: dict[str, str]):
        return manager_class.agent_loop_workers_class.options(
            runtime_env={"env_vars": {"PYTHONPATH": recipe_pythonpath(repo_root), "WEAVE_PRINT_CALL_LINK": "false",
                                      **env}}
        ).remote(config, llm, None, None)

    def step(worker, number: int) -> float:
        """One verl generate_sequences call; its wall time in seconds."""
        batch = DataProto(non_tensor_batch={k: v.copy() for k, v in non_tensor.items()},
                          meta_info={"global_steps": number, "validate": False})
        start = time.perf_counter()
        output = ray.get(worker.generate_sequences.remote(batch), timeout=240)
        assert len(output) == len(samples)
        return time.perf_counter() - start

    with contextlib.ExitStack() as stack:
        direct_wandb = stack.enter_context(loopback_wandb())
        flaky_wandb = stack.enter_context(loopback_wandb())
        online = RelayProcess(tmp_path_factory.mktemp("online") / "spool", "--max-retry-interval", "1",
                              WANDB_BASE_URL=flaky_wandb.url, WANDB_API_KEY=API_KEY)
        stack.callback(online.stop)
        offline = RelayProcess(tmp_path_factory.mktemp("offline") / "spool", "--offline",
                               "--entity", "loopback-entity")
        stack.callback(offline.stop)
        # no key in relayed workers: the relay authenticates to W&B (weave would find no netrc entry for it)
        workers = SimpleNamespace(
            direct=start_worker(direct_wandb.env),
            relayed=start_worker({**online.client_env, "WANDB_ENTITY": flaky_wandb.entity}),
            air_gapped=start_worker({**offline.client_env, "WANDB_ENTITY": "loopback-entity"}))
        yield SimpleNamespace(step=step, workers=workers, direct_wandb=direct_wandb, flaky_wandb=flaky_wandb,
                              online=online, offline=offline)
    ray.shutdown()



def assert_whole_traces(storage, steps: int) -> None:
    calls = storage.recorded_calls()
    ids = {c["id"] for c in calls}
    roots = [c for c in calls if c["parent_id"] is None]
    assert len(roots) == steps * len(QUESTIONS) * ROLLOUT_N
    assert all(c["parent_id"] in ids for c in calls if c["parent_id"] is not None)
    for call in calls:  # every call's op ref points at an op definition the server stored
        entity_project, name_digest = call["op_name"].removeprefix("weave:///").split("/op/")
        name, digest = name_digest.split(":")
        assert (entity_project, name, digest) in storage.object_versions, call["op_name"]


def test_exit_right_after_a_step_loses_no_trace(run):
    """Training ends and Ray tears the worker down: atexit never runs in an async actor, so whatever weave
    still queued is lost unless the worker flushed at the end of the step."""
    import ray

    run.step(run.workers.direct, 1)
    ray.kill(run.workers.direct)
    received = run.direct_wandb.wait_for_calls(CALLS_PER_STEP, timeout_s=15)
    print(f"normal exit: {CALLS_PER_STEP} calls made, {len(received)} received")
    assert len(received) == CALLS_PER_STEP
    assert_whole_traces(run.direct_wandb.storage, steps=1)


def test_wandb_outage_mid_run_loses_no_trace(run):
    """Workers trace through the node's relay; W&B goes away after the first step and comes back after the
    third. Steps during the outage take no longer than usual; every call arrives once W&B is back."""
    import ray

    wandb, worker = run.flaky_wandb, run.workers.relayed
    up = run.step(worker, 1)
    wandb.stop()
    down = [run.step(worker, n) for n in (2, 3)]
    ray.kill(worker)
    time.sleep(1.0)
    assert len(wandb.storage.complete_call_ids()) <= CALLS_PER_STEP  # nothing got through meanwhile
    wandb.start()
    received = wandb.wait_for_calls(3 * CALLS_PER_STEP, timeout_s=60)
    output = run.online.stop()
    print(f"outage: {3 * CALLS_PER_STEP} calls made, {len(received)} received; step seconds with W&B up "
          f"{up:.1f} (worker start-up included), down {[round(s, 1) for s in down]}")
    assert len(received) == 3 * CALLS_PER_STEP
    assert_whole_traces(wandb.storage, steps=3)
    assert max(down) < 30, down  # a step's flush is bounded; through the relay it is immediate
    assert run.online.process.returncode == 0 and ", 0 pending" in output, output


def test_air_gapped_run_uploads_every_trace_later(run, repo_root):
    """No W&B at all during training: the relay answers weave.init and keeps every write on disk; one command
    on a machine with network access sends them; running it again sends nothing twice."""
    import ray

    run.step(run.workers.air_gapped, 1)
    ray.kill(run.workers.air_gapped)
    output = run.offline.stop()
    assert run.offline.process.returncode == 3 and "0 trace records sent to W&B" in output, output

    def upload(wandb):
        env = {k: v for k, v in os.environ.items() if not k.startswith(("WANDB", "WF_"))}
        return subprocess.run([*command("gsm8k-upload-traces"), "--spool", str(run.offline.spool), "--upstream",
                               wandb.url],
                              env={**env, "WANDB_API_KEY": API_KEY}, capture_output=True, text=True, timeout=180)

    with loopback_wandb() as wandb:  # the machine with network access
        first = upload(wandb)
        received = wandb.storage.complete_call_ids()
        print(f"air-gapped: {CALLS_PER_STEP} calls made, {len(received)} received after upload")
        assert first.returncode == 0 and "; 0 pending" in first.stdout, first.stdout + first.stderr
        assert len(received) == CALLS_PER_STEP
        assert_whole_traces(wandb.storage, steps=1)
        requests = len(wandb.app.requests)
        again = upload(wandb)
        assert again.returncode == 0 and again.stdout.startswith("uploaded 0 trace records"), again.stdout
        assert len(wandb.app.requests) == requests  # nothing sent twice (not even the project check)
