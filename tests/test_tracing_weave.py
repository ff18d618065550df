"""Traces as users will open them: the real weave client (on our in-memory trace server), verl's own tracing
path (RolloutTraceConfig.init + rollout_trace_attr, as AgentLoopWorker does), the recipe's agent loop with
our tools, several concurrent rollouts, some of them not sampled for tracing."""

import asyncio
import contextvars

import pytest

from data_prep.gsm8k_rows import SourceRecord, build_row
from harness import agent_loop_inprocess as harness
from harness.qwen_tokenizer import load_qwen25_tokenizer
from harness.standins.scripted_llm import ScriptedLLM, tool_call
from harness.standins.weave_memory_server import install_memory_weave_client
from recipes.gsm8k.agent_loop import ScoredToolAgentLoop
from recipes.gsm8k.tool_sets import get_tool_set
from recipes.tracing.shaping import CHAT_OP, ROLLOUT_SUMMARY, TOKEN_FIELDS, TextOnlyTracer
from tools.calculator import NAME as CALCULATOR

pytestmark = pytest.mark.integration  # the calculator evaluates in a work process

PROJECT = "gsm8k-tracing-test"
QUESTIONS = {
    0: ("Natalia sold 48 clips in April and half as many in May. How many in total?", "72"),
    1: ("A rope of 7 m is cut in 2 equal pieces. How long is each piece?", "3.5"),
    2: ("Tom reads 12 pages a day for 6 days. How many pages?", "72"),
}
SCRIPTS = {  # (sample_index, rollout_n) -> assistant turns
    (0, 0): [tool_call(CALCULATOR, expression="48/2"), "48+24 = 72.\n#### 72"],
    (0, 1): ["I think it is 70.\n#### 70"],
    (1, 0): [tool_call(CALCULATOR, expression="7/0"), tool_call(CALCULATOR, expression="7/2"), "#### 3.5"],
    (2, 0): [tool_call(CALCULATOR, expression="12*6"), "#### 72"],
}
UNTRACED = {(2, 0)}


@pytest.fixture(scope="module")
def traced_run():
    from verl.utils.rollout_trace import RolloutTraceConfig, rollout_trace_attr

    tok = load_qwen25_tokenizer()
    config = harness.compose_trainer_config("calculator")
    tools = harness.load_tools(config)
    RolloutTraceConfig.reset()
    server, client = install_memory_weave_client(PROJECT)
    RolloutTraceConfig.init(PROJECT, "exp", "weave", token2text=True)  # weave.init finds our client: no network
    rows = {i: build_row(SourceRecord(q, f"#### {gt}", "t", i), "train", get_tool_set("calculator"))
            for i, (q, gt) in QUESTIONS.items()}
    current = contextvars.ContextVar("rollout")  # which (sample, rollout) this asyncio task is playing
    llm = ScriptedLLM(tok, lambda prompt: SCRIPTS[current.get()])

    async def one(key):
        current.set(key)
        sample_index, rollout_n = key
        with rollout_trace_attr(step=7, sample_index=sample_index, rollout_n=rollout_n, validate=False,
                                trace=key not in UNTRACED):  # as AgentLoopWorker._run_agent_loop does
            return await harness.run_rollout(config, tok, llm, tools, rows[sample_index], ScoredToolAgentLoop)

    async def all_rollouts():
        results = await asyncio.gather(*(one(key) for key in SCRIPTS))
        return dict(zip(SCRIPTS, results, strict=True))

    outputs = asyncio.run(all_rollouts())
    client.flush()
    yield {"calls": server.recorded_calls(), "outputs": outputs, "tok": tok, "config": config}
    RolloutTraceConfig.reset()


def roots(calls):
    return [c for c in calls if c["parent_id"] is None]


def children(calls, parent_id):
    return [c for c in calls if c["parent_id"] == parent_id]


def test_one_root_per_traced_trajectory_with_group_attributes(traced_run):
    root_calls = roots(traced_run["calls"])
    assert all("ScoredToolAgentLoop.run" in c["op_name"] for c in root_calls)
    seen = {(c["attributes"]["sample_index"], c["attributes"]["rollout_n"]) for c in root_calls}
    assert seen == set(SCRIPTS) - UNTRACED and len(root_calls) == len(seen)
    for call in root_calls:
        attrs = call["attributes"]
        assert attrs["step"] == 7 and attrs["validate"] is False and attrs["experiment_name"] == "exp"
        assert attrs["group"] == f"train/step7/prompt{attrs['sample_index']}"
        assert call["display_name"] == f"train step 7 · prompt {attrs['sample_index']} · rollout {attrs['rollout_n']}"


def test_root_carries_reward_and_what_the_model_did(traced_run):
    by_key = {(c["attributes"]["sample_index"], c["attributes"]["rollout_n"]): c for c in roots(traced_run["calls"])}
    expected = {(0, 0): (1.0, True, 1, 0), (0, 1): (0.0, False, 0, 0), (1, 0): (1.0, True, 2, 1)}
    for key, (reward, correct, tool_calls, tool_errors) in expected.items():
        out = by_key[key]["output"]
        assert (out["reward"], out["correct"], out["num_tool_calls"], out["num_tool_errors"]) == (
            reward, correct, tool_calls, tool_errors), key
        assert out["ground_truth"] == QUESTIONS[key[0]][1]
        assert out["final_answer"].endswith(SCRIPTS[key][-1].split("\n")[-1])
        # the trace's reward is the trained one: the score the loop handed verl for this trajectory
        assert out["reward"] == traced_run["outputs"][key].reward_score
        assert by_key[key]["inputs"]["kwargs"]["raw_prompt"][1]["content"].startswith(QUESTIONS[key[0]][0])


def test_children_are_the_turns_in_order_with_text_and_tool_io(traced_run):
    calls = traced_run["calls"]
    root = next(c for c in roots(calls) if (c["attributes"]["sample_index"], c["attributes"]["rollout_n"]) == (1, 0))
    kids = children(calls, root["id"])
    kinds = [c["op_name"].split("/op/")[-1].split(":")[0] for c in kids]
    generate, parse, execute = ("ScriptedLLM.generate", "HermesWithFeedbackToolParser.extract_tool_calls",
                                "CalculatorTool.execute")
    # the turns as they ran, then the whole conversation once more in the UI's chat shape (recipes/tracing/shaping.py)
    assert kinds == [generate, parse, execute, generate, parse, execute, generate, parse, CHAT_OP]
    first_gen, first_tool, second_tool, last_gen = kids[0], kids[2], kids[5], kids[6]
    # token2text: each turn's new text, decoded by the recipe's tracer; the context is not repeated at every turn
    assert first_gen["output"]["response_text"].startswith("<tool_call>")
    assert not any("prompt_text" in c["output"] for c in kids if c["output"] and "generate" in c["op_name"])
    assert QUESTIONS[1][0] in str(root["inputs"]) and "prompt_text" not in root["output"]
    assert first_tool["inputs"]["parameters"] == {"expression": "7/0"}
    assert "division by zero" in str(first_tool["output"])
    assert second_tool["inputs"]["parameters"] == {"expression": "7/2"} and "3.5" in str(second_tool["output"])
    assert "#### 3.5" in last_gen["output"]["response_text"]
    assert all(c["ended"] and not c["exception"] for c in kids)


def _walk(value, path="$"):
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _walk(v, f"{path}.{k}")
    elif isinstance(value, list):
        yield path, value
        for i, v in enumerate(value):
            yield from _walk(v, f"{path}[{i}]")


def _items(value):
    if isinstance(value, dict):
        for k, v in value.items():
            yield k, v
            yield from _items(v)
    elif isinstance(value, list):
        for v in value:
            yield from _items(v)


def test_no_token_id_lists_anywhere(traced_run):
    for call in traced_run["calls"]:
        for side in ("inputs", "output"):
            for path, value in _walk(call[side]):
                numbers = [v for v in value if isinstance(v, (int, float)) and not isinstance(v, bool)]
                assert len(numbers) <= 16, f"{call['op_name']} {side} {path} holds {len(numbers)} numbers"
            for key, value in _items(call[side]):
                if key in TOKEN_FIELDS:  # kept as a placeholder such as "<812 token ids>", never the ids
                    assert isinstance(value, str) and value.startswith("<"), f"{call['op_name']} {side}.{key}"
        flat = str(call["inputs"]) + str(call["output"])
        assert "AgentData object" not in flat


def test_untraced_samples_leave_no_calls(traced_run):
    calls = traced_run["calls"]
    traced_roots = {c["id"] for c in roots(calls)}
    assert all(c["parent_id"] in {x["id"] for x in calls} or c["id"] in traced_roots for c in calls)
    assert not any(QUESTIONS[2][0] in str(c["inputs"]) + str(c["output"]) for c in calls)
    # ... while the untraced trajectory itself ran normally
    assert traced_run["outputs"][(2, 0)].response_mask[-1] == 1


def test_text_only_tracer_replaces_token_data():
    recorded = {}

    class FakeClient:
        def create_call(self, op, inputs, attributes=None, **kw):
            recorded["inputs"], recorded["display_name"] = inputs, kw.get("display_name")
            return "call"

        def finish_call(self, call, output=None, exception=None, **kw):
            recorded["output"] = output

    tracer = TextOnlyTracer(FakeClient())
    root = tracer.create_call("x.ToolAgentLoop.run",
                              {"prompt_ids": list(range(500)), "raw_prompt": [{"content": "hi"}]},
                              attributes={"sample_index": 3, "step": 1, "rollout_n": 0})
    ROLLOUT_SUMMARY.set({"reward": 1.0})  # as the recipe loop's run does
    tracer.finish_call(root, output={"response_ids": list(range(900)), "response_text": "#### 1",
                                     "extra_fields": {}, "other": list(range(40))})
    assert recorded["inputs"] == {"prompt_ids": "<500 token ids>", "raw_prompt": [{"content": "hi"}]}
    assert list(recorded["output"])[0] == "reward" and recorded["output"]["reward"] == 1.0
    assert recorded["output"]["response_ids"] == "<900 token ids>" and ROLLOUT_SUMMARY.get() is None
    assert recorded["output"]["other"] == "<40 token ids>" and recorded["output"]["response_text"] == "#### 1"
    assert recorded["display_name"] == "train step 1 · prompt 3 · rollout 0"


def test_workers_build_the_recipe_loop_from_the_agent_loop_yaml(repo_root):
    """As AgentLoopWorker does: YAML entries override verl's registry, then hydra instantiates the entry."""
    import hydra
    from omegaconf import OmegaConf
    from verl.experimental.agent_loop.agent_loop import DictConfigWrap, ToolListWrap, _agent_loop_registry
    from verl.utils.dataset.rl_dataset import RLHFDataset

    tok = load_qwen25_tokenizer()
    config = harness.compose_trainer_config("calculator")
    registry = dict(_agent_loop_registry)  # verl's own entries (tool_agent -> ToolAgentLoop) ...
    for entry in OmegaConf.load(repo_root / "config" / "agent_loop.yaml"):
        registry[entry.name] = entry  # ... replaced by ours, exactly as the worker does
    loop = hydra.utils.instantiate(
        config=registry["tool_agent"], trainer_config=DictConfigWrap(config=config), server_manager=None,
        tokenizer=tok, processor=None, hf_model_type="qwen2", dataset_cls=RLHFDataset,
        data_config=DictConfigWrap(config.data), tools=ToolListWrap(harness.load_tools(config)))
    assert type(loop) is ScoredToolAgentLoop and list(loop.tools) == [CALCULATOR]


def test_weaves_object_search_steps_over_plain_values_only():
    """skip_plain_values: the plain JSON of a sanitized payload never reaches weave's per-value search, and a weave
    object (here an op) in a call's values is still found and published by weave's own code."""
    import weave

    from recipes.tracing.shaping import skip_plain_values

    server, client = install_memory_weave_client("skip-plain-values")
    searched = []
    weaves_own = client._save_nested_objects

    def counting(obj, name=None):
        searched.append(obj)
        return weaves_own(obj, name)

    client._save_nested_objects = counting
    skip_plain_values(client)
    skip_plain_values(client)  # once only
    plain = {"messages": [{"role": "user", "content": "hi", "n": 1, "x": None, "ok": True}], "f": 0.5}
    client.finish_call(client.create_call("plain_op", inputs=plain), output=plain)
    assert searched == []

    @weave.op
    def helper(x):
        return x

    client.finish_call(client.create_call("with_an_op", inputs={"tools": [{"fn": helper}]}), output=None)
    client.flush()
    assert searched == [helper]
    recorded = next(c for c in server.recorded_calls() if "with_an_op" in c["op_name"])
    assert recorded["inputs"]["tools"][0]["fn"].startswith("weave:///") and "/op/helper:" in str(recorded["inputs"])


def test_sanitize_leaves_out_empty_fields_and_names_the_tool_schemas():
    from recipes.tracing.shaping import sanitize
    from tools.calculator import CalculatorTool

    inputs = {"responses_ids": list(range(40)), "tools": [CalculatorTool.SCHEMA], "image_data": None,
              "mm_processor_kwargs": {}, "turn_scores": [], "text": "", "reward": 0.0, "ok": False,
              "nested": {"audio_data": None, "n": 1}}
    assert sanitize(inputs) == {"responses_ids": "<40 token ids>", "tools": [CALCULATOR], "text": "", "reward": 0.0,
                                "ok": False, "nested": {"n": 1}}
    assert sanitize({"tools": ["not a schema"]}) == {"tools": ["not a schema"]}
