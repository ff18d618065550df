"""One trajectory's trace root as W&B receives it: the real weave client over HTTP to the loopback W&B stand-in
(harness.standins.weave_http_server), verl's tracing path, the recipe's agent loop with the calculator tool.
The root must read as a conversation: reward and correctness first, then the turns as chat messages in the OpenAI
shape the Weave UI shows as a chat (weave-js ChatView: isTraceCallChatFormatOpenAI, isMessage, isToolCall). A
problem of three chained steps (the CPU learning check's chain task) must show the chain: call, result, a call on
that result, ..."""

import asyncio
import json

import numpy as np
import pytest

from data_prep.gsm8k_rows import SourceRecord, build_row
from harness import agent_loop_inprocess as harness
from harness.learning import task
from harness.learning.transcripts import expressions_of, scripted_turns
from harness.qwen_tokenizer import load_qwen25_tokenizer
from harness.standins.scripted_llm import ScriptedLLM, tool_call
from recipes.gsm8k.agent_loop import ScoredToolAgentLoop
from recipes.gsm8k.tool_sets import get_tool_set
from recipes.tracing.shaping import CHAT_OP
from testkit.weave_tracing import traced_to_loopback_wandb
from tools.calculator import NAME as CALCULATOR

pytestmark = pytest.mark.integration

QUESTION = "Natalia sold 48 clips in April and half as many in May. How many in total?"
TURNS = [tool_call(CALCULATOR, expression="48/2"), "48 + 24 = 72 clips.\n#### 72"]


def traced_calls(row: dict, turns: list[str], max_turns: int = 5) -> list[dict]:
    """Every call W&B received for one traced trajectory of `row` whose model writes `turns`."""
    from verl.utils.rollout_trace import RolloutTraceConfig, rollout_trace_attr

    tok = load_qwen25_tokenizer()
    config = harness.compose_trainer_config(
        "calculator", (f"actor_rollout_ref.rollout.multi_turn.max_assistant_turns={max_turns}",))
    tools = harness.load_tools(config)
    row = {**row, "prompt": np.array(row["prompt"], dtype=object)}  # as verl's batch hands raw_prompt to the loop
    llm = ScriptedLLM(tok, lambda prompt: turns)

    async def rollout():
        with rollout_trace_attr(step=3, sample_index=0, rollout_n=0, validate=False):
            return await harness.run_rollout(config, tok, llm, tools, row, ScoredToolAgentLoop)

    with traced_to_loopback_wandb() as wandb:
        RolloutTraceConfig.init("gsm8k-conversation-test", "exp", "weave", token2text=True)
        asyncio.run(rollout())
        RolloutTraceConfig.get_client().flush()
        return wandb.storage.recorded_calls()


@pytest.fixture(scope="module")
def received():
    """Every call W&B received for one traced trajectory, and the row it ran."""
    row = build_row(SourceRecord(QUESTION, "#### 72", "t", 0), "train", get_tool_set("calculator"))
    return {"calls": traced_calls(row, TURNS), "row": row}


def test_root_output_starts_with_the_reward_and_reads_as_a_conversation(received):
    [root] = [c for c in received["calls"] if c["parent_id"] is None]
    out = root["output"]
    assert list(out)[:2] == ["reward", "correct"] and (out["reward"], out["correct"]) == (1.0, True)
    assert out["final_answer"] == TURNS[-1]  # the model's last text, no role word before it
    messages = out["messages"]
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool", "assistant"]
    system, user = received["row"]["prompt"]
    assert messages[0]["content"] == system["content"] and messages[1]["content"] == user["content"]
    call_turn, tool_turn, answer_turn = messages[2:]
    [call] = call_turn["tool_calls"]
    assert call["type"] == "function" and call["function"]["name"] == CALCULATOR
    assert json.loads(call["function"]["arguments"]) == {"expression": "48/2"}
    assert call_turn["content"] == ""  # the call is structured, not left as <tool_call> text
    assert tool_turn["tool_call_id"] == call["id"] and tool_turn["content"] == "24"
    assert answer_turn == {"role": "assistant", "content": TURNS[-1]}
    for message in messages[2:]:  # no chat-template residue: role words, tags
        text = message["content"] or ""
        assert not text.startswith(("assistant", "user")) and "<tool_response>" not in text, message
    assert out["num_tool_calls"] == 1 and out["num_tool_results"] == 1 and out["num_tool_errors"] == 0


def test_the_conversation_is_a_chat_call_the_weave_ui_shows_as_a_chat(received):
    [root] = [c for c in received["calls"] if c["parent_id"] is None]
    [chat] = [c for c in received["calls"] if c["parent_id"] == root["id"] and CHAT_OP in c["op_name"]]
    # OpenAI chat completion: the request's messages, the model's last turn as choices[0].message
    assert chat["inputs"]["messages"] == root["output"]["messages"][:-1]
    assert chat["output"]["choices"] == [{"index": 0, "message": root["output"]["messages"][-1],
                                          "finish_reason": "stop"}]
    for message in chat["inputs"]["messages"]:  # what weave-js isMessage / isToolCall accept
        assert isinstance(message["role"], str) and ("content" in message or "tool_calls" in message)
        for call in message.get("tool_calls", []):
            assert all(isinstance(v, str) for v in (call["id"], call["type"], call["function"]["name"],
                                                    call["function"]["arguments"]))


def test_every_tool_call_is_answered_in_the_order_written_malformed_ones_included():
    """verl answers a turn's <tool_call>s in order (up to max_parallel_calls), malformed ones too (recipes/
    tool_parser.py), so results pair with calls by position. Decoded turns as the response mask splits them."""
    from recipes.gsm8k.trajectory import chat_messages

    turns = [(True, 'Let me compute.<tool_call>\n{"name": "calculator", "arguments": {"expression": "7/"}\n'
                    '</tool_call>\n<tool_call>\n{"name": "calculator", "arguments": {"expression": "7/2"}}\n'
                    '</tool_call>'),
             (False, "\nuser\n<tool_response>\nInvalid JSON in arguments for 'calculator'\n</tool_response>\n"
                     "<tool_response>\n3.5\n</tool_response>\nassistant\n"),
             (True, "#### 3.5")]
    messages = chat_messages([{"role": "user", "content": "7/2?"}], turns)
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "tool", "assistant"]
    bad, good = messages[1]["tool_calls"]
    assert messages[1]["content"] == "Let me compute."
    assert bad["function"] == {"name": "calculator", "arguments": '{"name": "calculator", "arguments": '
                                                                  '{"expression": "7/"}'}  # as written
    assert json.loads(good["function"]["arguments"]) == {"expression": "7/2"}
    assert (messages[2]["tool_call_id"], messages[3]["tool_call_id"]) == (bad["id"], good["id"])
    assert messages[2]["content"].startswith("Invalid JSON") and messages[3]["content"] == "3.5"
    assert messages[4] == {"role": "assistant", "content": "#### 3.5"}


def test_a_three_step_chain_reads_as_call_result_call_on_that_result():
    """The chain task's depth-3 problem, solved with one call per step: the root's messages hold each call, its
    result, and the next call made on that result, then the answer (what a user opens in Weave)."""
    problem = next(p for p in task.make_splits(0, 6, seed=2, task="chain")["test"] if p.depth == 3)
    row = build_row(SourceRecord(problem.question, problem.record()["answer"], "t", 0), "test",
                    get_tool_set("calculator"))
    [root] = [c for c in traced_calls(row, scripted_turns(row)) if c["parent_id"] is None]
    out = root["output"]
    assert (out["reward"], out["correct"], out["num_tool_calls"], out["num_tool_results"]) == (1.0, True, 3, 3)
    messages = out["messages"]
    assert [m["role"] for m in messages] == ["system", "user"] + ["assistant", "tool"] * 3 + ["assistant"]
    calls, results = messages[2:8:2], messages[3:8:2]
    sent = [json.loads(m["tool_calls"][0]["function"]["arguments"])["expression"] for m in calls]
    assert sent == expressions_of(row) and [r["content"] for r in results] == [str(v) for _, v in problem.steps]
    for result, next_call in zip(results[:-1], sent[1:], strict=True):  # each result carried into the next call
        assert next_call.split(" ")[0] == result["content"]
    assert [r["tool_call_id"] for r in results] == [m["tool_calls"][0]["id"] for m in calls]
    assert messages[-1] == {"role": "assistant", "content": f"#### {problem.answer}"}
