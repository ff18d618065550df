"""The rollout batch must not depend on whether a worker traces. verl turns each agent loop's extra_fields into
batch columns (AgentLoopWorker._postprocess) and concatenates the workers' batches (DataProto.concat), which
needs the same columns from every worker: a worker whose weave.init failed (tracing off) next to one that
traces must not crash the step. Runs the recipe loop traced and untraced, then verl's own postprocessing."""

import asyncio

import numpy as np
import pytest

from data_prep.gsm8k_rows import SourceRecord, build_row
from harness import agent_loop_inprocess as harness
from harness.qwen_tokenizer import load_qwen25_tokenizer
from harness.standins.scripted_llm import ScriptedLLM, tool_call
from harness.standins.weave_memory_server import install_memory_weave_client
from recipes.gsm8k.agent_loop import ScoredToolAgentLoop
from recipes.gsm8k.tool_sets import get_tool_set
from tools.calculator import NAME as CALCULATOR

pytestmark = pytest.mark.integration  # the calculator evaluates in a work process

QUESTION, ANSWER = "Tom reads 12 pages a day for 6 days. How many pages?", "72"
SCRIPT = [tool_call(CALCULATOR, expression="12*6"), "#### 72"]


def postprocess_worker(config, tokenizer):
    """verl's AgentLoopWorker without Ray, the LLM server or its __init__: just what its postprocessing reads."""
    from verl.experimental.agent_loop.agent_loop import AgentLoopWorker
    from verl.utils.config import omega_conf_to_dataclass

    worker = object.__new__(AgentLoopWorker)
    worker.config = config
    worker.rollout_config = omega_conf_to_dataclass(config.actor_rollout_ref.rollout)
    worker.tokenizer, worker.processor, worker.mm_processor_kwargs = tokenizer, None, {}
    worker.reward_loop_worker_handles, worker.distillation_enabled = None, False
    return worker


def rollout_batch(worker, config, tokenizer, tools, trace: bool):
    """One worker's output for 2 samples of one prompt, as generate_sequences builds it."""
    from verl.utils.rollout_trace import rollout_trace_attr

    row = build_row(SourceRecord(QUESTION, f"#### {ANSWER}", "test", 0), "train", get_tool_set("calculator"))
    kwargs = harness.row_kwargs(row)
    kwargs.pop("agent_name")

    async def one(rollout_n):
        with rollout_trace_attr(step=1, sample_index=0, rollout_n=rollout_n, validate=False, trace=trace):
            output = await harness.run_rollout(config, tokenizer, ScriptedLLM(tokenizer, lambda _: SCRIPT), tools, row,
                                               ScoredToolAgentLoop)
        return await worker._agent_loop_postprocess(output, False, **kwargs)

    async def both():
        return await asyncio.gather(one(0), one(1))

    outputs = asyncio.run(both())
    non_tensor = {k: np.array([v, v], dtype=object) for k, v in kwargs.items()}
    return worker._postprocess(outputs, input_non_tensor_batch=non_tensor, validate=False)


def test_traced_and_untraced_workers_give_the_same_batch_columns():
    from verl.protocol import DataProto
    from verl.utils.rollout_trace import RolloutTraceConfig

    tok = load_qwen25_tokenizer()
    config = harness.compose_trainer_config("calculator", ("actor_rollout_ref.rollout.name=sglang",))
    tools = harness.load_tools(config)
    worker = postprocess_worker(config, tok)
    try:
        RolloutTraceConfig.reset()
        server, client = install_memory_weave_client("schema-test")
        RolloutTraceConfig.init("schema-test", "exp", "weave", token2text=True)
        traced = rollout_batch(worker, config, tok, tools, trace=True)
        client.flush()
        RolloutTraceConfig.reset()
        RolloutTraceConfig.init("schema-test", "exp", None)  # what the guard leaves when weave.init failed
        untraced = rollout_batch(worker, config, tok, tools, trace=True)
    finally:
        RolloutTraceConfig.reset()

    for batches in ([untraced, traced], [traced, untraced]):  # as AgentLoopManager merges its workers' outputs
        merged = DataProto.concat(batches)
        assert len(merged) == 4 and set(merged.non_tensor_batch) == set(traced.non_tensor_batch)
    assert set(traced.non_tensor_batch) == set(untraced.non_tensor_batch)
    roots = [c for c in server.recorded_calls() if c["parent_id"] is None]
    assert len(roots) == 2 and all(r["output"]["reward"] == 1.0 for r in roots)  # the summary still reaches the trace
