"""One Weave thread per traced GRPO group, with verl's own advantages on each rollout's root, as W&B holds them.

verl's real AgentLoopWorker.generate_sequences (the recipe's TracedAgentLoopWorker, in this process, no Ray) runs
the recipe's agent loop and tracer on a few GSM8K-style prompts, n=4 rollouts each, chunked as verl's manager chunks
a step for 2 agent-loop workers; the model is a script (right or wrong answers, with or without a calculator call,
so the rewards of a group differ, tool_call_bonus=0.1 as the CPU smoke pays it). The real weave client sends the
traces over HTTP to the loopback W&B stand-in; everything is read back through weave's public reads (get_calls,
the thread list). verl's trainer's advantages come from its own compute_advantage on the step's concatenated chunks,
rows shuffled as its balance_batch reorders them, with norm_adv_by_std_in_grpo=False (Dr.GRPO: a figure computed
with the default would differ).
"""

from __future__ import annotations

import asyncio
import random
import uuid
from collections import defaultdict

import numpy as np
import pytest

from data_prep.gsm8k_rows import SourceRecord, build_row
from harness import agent_loop_inprocess as harness
from harness.held_calls import held_calls, weave_reader
from harness.standins.scripted_llm import ScriptedLLM, tool_call
from recipes.gsm8k.tool_sets import get_tool_set
from recipes.tracing.volume import GROUPS_KEY
from testkit.weave_tracing import traced_to_loopback_wandb
from tools.calculator import NAME as CALCULATOR

pytestmark = pytest.mark.integration

N, WORKERS, PROMPTS, STEPS = 4, 2, 4, 2  # rollout.n; agent-loop workers; prompts a step; steps per phase
PROJECT, EXPERIMENT = "gsm8k-groups-test", "groups"
QUESTIONS = [("A baker has 48 muffins and sells half. How many are left?", "48/2", 24),
             ("Tom reads 12 pages a day for 6 days. How many pages?", "12*6", 72),
             ("A town of 1000 houses builds 250 more. How many houses?", "1000+250", 1250),
             ("Sam has 9 boxes of 7 pens. How many pens?", "9*7", 63),
             ("A tank holds 90 litres and loses 15. How much is left?", "90-15", 75),
             ("Ann buys 3 books at 8 dollars. What does she pay?", "3*8", 24),
             ("A class of 30 splits into 5 teams. How many in a team?", "30/5", 6),
             ("Jo runs 4 km a day for 7 days. How far?", "4*7", 28)]


def scripts(seed: int):
    """A script per trajectory: right or wrong, with or without a calculator call (rewards 1.1, 1, 0.1, 0)."""
    rng = random.Random(seed)
    answers = {q: (expression, answer) for q, expression, answer in QUESTIONS}

    def script_for(prompt_text: str) -> list[str]:
        expression, answer = next(v for q, v in answers.items() if q in prompt_text)
        final = f"#### {answer + rng.choice((0, 1))}"
        return [tool_call(CALCULATOR, expression=expression), final] if rng.random() < 0.5 else [final]
    return script_for


def step_batch(step: int):
    """verl's trainer's batch for a step: a uid per prompt, n interleaved repeats, global_steps."""
    from verl.protocol import DataProto

    samples = []
    for number in range(PROMPTS):
        index = (step * PROMPTS + number) % len(QUESTIONS)
        question, _, answer = QUESTIONS[index]
        row = build_row(SourceRecord(question, f"#### {answer}", "t", index), "train", get_tool_set("calculator"))
        kwargs = harness.row_kwargs({**row, "prompt": np.array(row["prompt"], dtype=object)})
        kwargs["uid"] = str(uuid.uuid4())
        samples += [dict(kwargs) for _ in range(N)]
    columns = {key: np.array([s[key] for s in samples], dtype=object) for key in samples[0]}
    return DataProto(non_tensor_batch=columns, meta_info={"global_steps": step, "validate": False})


async def run_steps(worker, steps, groups: int | None) -> dict[int, list]:
    """Each step's chunks through the one worker, as the manager hands them to its workers in order."""
    from omegaconf import OmegaConf
    from verl.experimental.agent_loop.agent_loop import get_trajectory_info

    OmegaConf.update(worker.config, GROUPS_KEY, groups, force_add=True)
    outputs = {}
    for step in steps:
        outputs[step] = []
        for slot, chunk in enumerate(step_batch(step).chunk(WORKERS)):
            worker.set_trace_slot(slot)
            out = await worker.generate_sequences(chunk)
            info = await get_trajectory_info(step, chunk.non_tensor_batch["index"].tolist(), False)
            out.non_tensor_batch["rollout_n"] = np.array([i["rollout_n"] for i in info], dtype=object)
            outputs[step].append(out)
    return outputs


def verl_advantages(config, outputs: dict[int, list]) -> dict[tuple[str, int], float]:
    """(uid, rollout_n) -> the advantage verl's trainer computes for it (its compute_advantage, rows reordered)."""
    import torch
    from verl.protocol import DataProto
    from verl.trainer.ppo.ray_trainer import compute_advantage

    found = {}
    for step, chunks in outputs.items():
        data = DataProto.concat(chunks)
        order = list(range(len(data)))
        random.Random(step).shuffle(order)
        data.reorder(torch.tensor(order))
        data.batch["token_level_rewards"] = data.batch["rm_scores"]
        data = compute_advantage(data, adv_estimator=config.algorithm.adv_estimator,
                                 norm_adv_by_std_in_grpo=config.algorithm.norm_adv_by_std_in_grpo, num_repeat=N,
                                 config=config.algorithm)
        for i in range(len(data)):
            valid = data.batch["response_mask"][i].bool()
            found[(data.non_tensor_batch["uid"][i], data.non_tensor_batch["rollout_n"][i])] = \
                float(data.batch["advantages"][i][valid][0])
    return found


@pytest.fixture(scope="module")
def traced():
    """Two steps at verl's own sampling (1 prompt of 2 on each worker), then two at the launcher's budget of 1 group
    a step (in turn); what W&B holds of them, and verl's advantages."""
    from verl.utils.rollout_trace import RolloutTraceConfig

    from harness.qwen_tokenizer import build_tiny_qwen2_model_dir, default_cache_dir, load_qwen25_tokenizer
    from recipes.gsm8k.worker import TracedAgentLoopWorker

    model = build_tiny_qwen2_model_dir(default_cache_dir() / "tiny-qwen2")
    config = harness.compose_trainer_config("calculator", (
        f"trainer.project_name={PROJECT}", f"trainer.experiment_name={EXPERIMENT}", f"actor_rollout_ref.rollout.n={N}",
        f"actor_rollout_ref.rollout.agent.num_workers={WORKERS}", f"data.train_batch_size={PROMPTS}",
        "actor_rollout_ref.rollout.trace.max_samples_per_step_per_worker=1",
        "algorithm.norm_adv_by_std_in_grpo=false", "reward.custom_reward_function.reward_kwargs.tool_call_bonus=0.1"),
        model_path=str(model))
    with traced_to_loopback_wandb() as wandb:
        worker = TracedAgentLoopWorker(config, ScriptedLLM(load_qwen25_tokenizer(), scripts(seed=3)), None, None)
        sampled = asyncio.run(run_steps(worker, (1, 2), None))
        budgeted = asyncio.run(run_steps(worker, (3, 4), 1))
        RolloutTraceConfig.get_client().flush()
        reader = weave_reader(wandb.url, None, wandb.entity, PROJECT)
        calls = held_calls(reader, EXPERIMENT)
        threads = list(reader.server.threads_query_stream({"project_id": f"{wandb.entity}/{PROJECT}"}))
        # one thread's rows through weave's own filter, as the Weave UI opens a thread
        first = next(c["thread_id"] for c in calls if c["parent_id"] is None)
        in_thread = list(reader.get_calls(filter={"thread_ids": [first], "trace_roots_only": True}))
    roots = [c for c in calls if c["parent_id"] is None]
    return {"config": config, "calls": calls, "roots": roots, "threads": threads, "in_thread": in_thread,
            "advantages": verl_advantages(config, {**sampled, **budgeted})}


def by_thread(roots: list[dict]) -> dict[str, list[dict]]:
    grouped = defaultdict(list)
    for root in roots:
        grouped[root["thread_id"]].append(root)
    return grouped


def test_every_traced_group_is_one_thread_of_its_n_rollouts(traced):
    threads = by_thread(traced["roots"])
    assert None not in threads, "a traced training rollout outside any thread"
    # steps 1-2: each worker traced 1 of its 2 prompts (verl's sampling); steps 3-4: 1 group a step in all
    steps = sorted(root["attributes"]["step"] for members in threads.values() for root in members[:1])
    assert steps == [1, 1, 2, 2, 3, 4], steps
    for thread_id, members in threads.items():
        assert sorted(m["attributes"]["rollout_n"] for m in members) == list(range(N)), thread_id
        [(step, prompt)] = {(m["attributes"]["step"], m["attributes"]["sample_index"]) for m in members}
        assert thread_id.startswith(f"{EXPERIMENT}/train/step{step}/prompt{prompt}/"), thread_id
    # the Weave UI's thread list: one row per group, its n rollouts its turns
    assert sorted((t.thread_id, t.turn_count) for t in traced["threads"]) == sorted((t, N) for t in threads)


def test_each_root_shows_its_reward_and_verls_own_advantage(traced):
    groups = by_thread(traced["roots"])
    for thread_id, members in groups.items():
        rewards = [m["output"]["reward"] for m in members]
        for member in members:
            out = member["output"]
            assert list(out)[:5] == ["reward", "advantage", "group_mean", "group_std", "group_size"], list(out)[:8]
            assert out["group_size"] == N and out["group_mean"] == pytest.approx(np.mean(rewards), abs=1e-6)
            uid = next(u for u, n in traced["advantages"] if u.startswith(thread_id.rsplit("/", 1)[1]))
            verl = traced["advantages"][(uid, member["attributes"]["rollout_n"])]
            assert out["advantage"] == pytest.approx(verl, abs=1e-6), (thread_id, out["advantage"], verl)
    # Dr.GRPO (no division by the std): the advantage is the reward less the group's mean
    some = traced["roots"][0]["output"]
    assert some["advantage"] == pytest.approx(some["reward"] - some["group_mean"], abs=1e-6)
    assert any(abs(m["output"]["advantage"]) > 0.05 for m in traced["roots"])  # rewards differed in some group


def test_every_call_of_a_rollout_is_in_its_groups_thread_and_its_chat_view_stays(traced):
    roots = {r["trace_id"]: r for r in traced["roots"]}
    calls = traced["calls"]
    ids = {c["id"] for c in calls}
    for call in calls:
        root = roots[call["trace_id"]]
        assert call["thread_id"] == root["thread_id"], call["op_name"]
        assert call["ended"] and (call["parent_id"] is None or call["parent_id"] in ids)
    chats = [c for c in calls if "trajectory_chat" in c["op_name"]]
    assert len(chats) == len(roots)  # one chat call per trajectory, under its root
    thread_id = traced["roots"][0]["thread_id"]
    assert len(traced["in_thread"]) == N and {c.thread_id for c in traced["in_thread"]} == {thread_id}


def test_below_one_group_per_worker_the_workers_trace_in_turn(traced):
    """The launcher's budget of 1 group a step (GROUPS_KEY) on 2 workers: one whole group a step, the first
    worker's chunk at step 4, the second's at step 3 (recipes.tracing.volume.groups_on_worker)."""
    budgeted = [r for r in traced["roots"] if r["attributes"]["step"] in (3, 4)]
    per_step = defaultdict(set)
    for root in budgeted:
        per_step[root["attributes"]["step"]].add(root["attributes"]["sample_index"])
    assert {step: len(prompts) for step, prompts in per_step.items()} == {3: 1, 4: 1}
    chunk = PROMPTS // WORKERS  # the prompts of worker w at step s are step_batch's prompts w*chunk ...
    first_of = {s: [(s * PROMPTS + w * chunk + i) % len(QUESTIONS) for w in range(WORKERS) for i in range(chunk)]
                for s in (3, 4)}
    assert next(iter(per_step[3])) in first_of[3][chunk:] and next(iter(per_step[4])) in first_of[4][:chunk]
