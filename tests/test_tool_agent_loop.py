"""Our tools inside verl 0.9.1's real ToolAgentLoop, run as the recipe's agent loop (recipes/gsm8k/agent_loop.py):
real Qwen2.5 tokenizer, our YAML through verl's loader, verl's composed config. Only the LLM server is a stand-in
(harness.standins.scripted_llm: scripted turns as tokens)."""

import asyncio
import time

import pytest

from data_prep.gsm8k_rows import DATA_SOURCE, SourceRecord, build_row
from harness import agent_loop_inprocess as harness
from harness.qwen_tokenizer import load_qwen25_tokenizer
from harness.standins.scripted_llm import ScriptedLLM, tool_call
from recipes.gsm8k.agent_loop import ScoredToolAgentLoop
from recipes.gsm8k.reward import compute_score
from recipes.gsm8k.tool_sets import get_tool_set
from recipes.gsm8k.trajectory import model_text, split_turns
from tools.calculator import NAME as CALCULATOR
from tools.gsm8k_reward_tool import NAME as CALC_GSM8K_REWARD

pytestmark = pytest.mark.integration  # the calculator evaluates in a work process

QUESTION = "Natalia sold 48 clips in April and half as many in May. How many clips did she sell in total?"


@pytest.fixture(scope="module")
def tok():
    return load_qwen25_tokenizer()


@pytest.fixture(scope="module")
def config():
    return harness.compose_trainer_config("both")


@pytest.fixture(scope="module")
def roomy_config():
    """A response budget big enough for a 10,000-character tool call to reach the tool."""
    return harness.compose_trainer_config("both", ("actor_rollout_ref.rollout.response_length=12000",))


@pytest.fixture(scope="module")
def tools(config):
    return harness.load_tools(config)


def make_row(ground_truth="72", question=QUESTION, index=0):
    return build_row(SourceRecord(question, f"#### {ground_truth}", "test", index), "train", get_tool_set("both"))


def rollout(tok, config, tools, turns, row=None):
    server = ScriptedLLM(tok, lambda prompt: turns)

    async def go():
        return await harness.run_rollout(config, tok, server, tools, row or make_row(), ScoredToolAgentLoop)

    return asyncio.run(go()), server


def segments(tok, output):
    """Decode the response as runs of equal mask: [(mask, text), ...]."""
    runs, current, ids = [], None, []
    for token, mask in zip(output.response_ids, output.response_mask, strict=True):
        if mask != current and ids:
            runs.append((current, tok.decode(ids)))
            ids = []
        current = mask
        ids.append(token)
    runs.append((current, tok.decode(ids)))
    return runs


def reward(tok, output, ground_truth="72", **kw):
    """The recipe's reward, with reward_kwargs `kw`, on what the model wrote as the response mask says."""
    text = model_text(split_turns(output.response_ids, output.response_mask,
                                  lambda ids: tok.decode(ids, skip_special_tokens=True)))
    result = compute_score(DATA_SOURCE, text, ground_truth, extra_info={}, **kw)
    if not kw:  # the config's own kwargs: what the loop handed verl
        assert output.reward_score == result["score"], (output.reward_score, result)
    return result


def test_calculator_turn_then_answer(tok, config, tools):
    first, last = tool_call(CALCULATOR, expression="48/2"), "48+24 = 72 clips.\n#### 72"
    output, server = rollout(tok, config, tools, [first, last])
    assert segments(tok, output) == [
        (1, first + "<|im_end|>"),  # the model's tokens, trained on
        (0, "\n<|im_start|>user\n<tool_response>\n24\n</tool_response><|im_end|>\n<|im_start|>assistant\n"),
        (1, last + "<|im_end|>"),
    ]
    assert len(server.calls) == 2 and output.num_turns == 4  # user + 2 assistant + 1 tool turn
    # No tokenization drift: the whole trajectory is what the chat template renders for the conversation.
    messages = make_row()["prompt"] + [
        {"role": "assistant", "content": "", "tool_calls": [
            {"type": "function", "function": {"name": CALCULATOR, "arguments": {"expression": "48/2"}}}]},
        {"role": "tool", "content": "24"},
        {"role": "assistant", "content": last},
    ]
    schemas = [t.tool_schema.model_dump(exclude_unset=True, exclude_none=True) for t in tools]
    rendered = tok.apply_chat_template(messages, tools=schemas, tokenize=False)
    assert tok.decode(output.prompt_ids + output.response_ids) + "\n" == rendered
    # the second generate call saw exactly the tokens of the first turn plus the tool turn
    seen = server.calls[1]["prompt_ids"]
    assert seen == output.prompt_ids + output.response_ids[: len(seen) - len(output.prompt_ids)]
    assert reward(tok, output)["score"] == 1.0
    assert output.extra_fields["tool_rewards"] == [0.0]


@pytest.mark.parametrize("ground_truth, verdict, step_reward", [("72", "correct", 1.0), ("70", "not correct", 0.0)])
def test_answer_checker_reads_the_rows_ground_truth(tok, config, tools, ground_truth, verdict, step_reward):
    turns = [tool_call(CALC_GSM8K_REWARD, answer="72"), "#### 72"]
    output, _ = rollout(tok, config, tools, turns, make_row(ground_truth))
    tool_text = segments(tok, output)[1][1]
    assert f"<tool_response>\nYour answer 72 is {verdict}.\n</tool_response>" in tool_text
    assert output.extra_fields["tool_rewards"] == [step_reward]


HOSTILE = {
    "unknown tool": (tool_call("python", code="print(1)"), "Unknown function 'python'"),
    "import": (tool_call(CALCULATOR, expression="__import__('os').system('x')"), "Error: unsupported: function calls"),
    "huge power": (tool_call(CALCULATOR, expression="9**9**9"), "Error: exponent too large"),
    "division by zero": (tool_call(CALCULATOR, expression="1/0"), "Error: division by zero"),
    "10k characters": (tool_call(CALCULATOR, expression="1+" * 5000 + "1"), "Error: expression too long"),
    "wrong argument": (tool_call(CALCULATOR, expr="1+1"), "missing argument"),
    "arguments not an object": ('<tool_call>\n{"name": "calculator", "arguments": "1+1"}\n</tool_call>', None),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_bad_calls_become_messages_and_the_loop_ends_normally(tok, config, roomy_config, tools, case):
    call, message = HOSTILE[case]
    start = time.perf_counter()
    budget = roomy_config if case == "10k characters" else config
    output, server = rollout(tok, budget, tools, [call, "Sorry.\n#### 72"])
    assert time.perf_counter() - start < 5
    runs = segments(tok, output)
    assert runs[-1][1].endswith("#### 72<|im_end|>") and runs[-1][0] == 1  # the model got its next turn
    if message:  # the tool (or verl, for an unknown tool) answered with a message the model can read
        assert any(mask == 0 and message in text for mask, text in runs), runs
    assert reward(tok, output)["acc"] == 1.0


MALFORMED = '<tool_call>\n{"name": "calculator", "arguments": {"expression": "1+1"\n</tool_call>'


def test_verl_hermes_alone_ends_the_trajectory_on_malformed_call_json(tok, tools):
    """verl's own hermes parser drops a tool call whose JSON does not parse; the turn then counts as final."""
    hermes = harness.compose_trainer_config("both", ("actor_rollout_ref.rollout.multi_turn.format=hermes",))
    output, server = rollout(tok, hermes, tools, [MALFORMED, "#### 72"])
    assert segments(tok, output) == [(1, MALFORMED + "<|im_end|>")] and len(server.calls) == 1
    result = reward(tok, output, tool_call_bonus=0.1)
    assert result["score"] == 0.0 and result["num_bad_tool_calls"] == 1  # no answer, and no bonus for it


def test_the_recipe_parser_gets_a_malformed_call_answered_by_verl(tok, config, tools):
    """multi_turn.format=hermes_with_feedback (the recipe's): verl's loop answers the call it could not read with
    its own "Invalid JSON" message, and the model gets its next turn."""
    assert config.actor_rollout_ref.rollout.multi_turn.format == "hermes_with_feedback"
    output, server = rollout(tok, config, tools, [MALFORMED, tool_call(CALCULATOR, expression="1+1"), "#### 72"])
    runs = segments(tok, output)
    assert [mask for mask, _ in runs] == [1, 0, 1, 0, 1]
    assert "<tool_response>\nInvalid JSON in arguments for 'calculator': " in runs[1][1]
    assert "<tool_response>\n2\n</tool_response>" in runs[3][1] and runs[4][1] == "#### 72<|im_end|>"
    assert reward(tok, output)["score"] == 1.0 and len(server.calls) == 3


@pytest.mark.parametrize("body, verl_says", [
    ('{"name": "calculator", "arguments": {"expression": "1+1"', "Invalid JSON in arguments for 'calculator'"),
    ('{"name": "calculator", "expression": "1+1"}', "Invalid JSON in arguments for 'calculator'"),
    ("calculator(1+1)",
     "Unknown function 'unreadable_tool_call'. Available tools: ['calculator', 'calc_gsm8k_reward']"),
])
def test_every_unreadable_call_gets_an_answer(tok, config, tools, body, verl_says):
    output, _ = rollout(tok, config, tools, [f"<tool_call>\n{body}\n</tool_call>", "#### 72"])
    runs = segments(tok, output)
    assert [mask for mask, _ in runs] == [1, 0, 1] and verl_says in runs[1][1], runs


def test_an_unclosed_call_is_answered_too(tok, config, tools):
    output, _ = rollout(tok, config, tools, ['<tool_call>\n{"name": "calculator", "arguments": {"expression": "2*3"}}',
                                             "#### 72"])
    assert "<tool_response>\n6\n</tool_response>" in segments(tok, output)[1][1]


def test_the_recipe_loop_still_respects_the_turn_limit(tok, tools):
    config = harness.compose_trainer_config("both", ("actor_rollout_ref.rollout.multi_turn.max_assistant_turns=2",))
    server = ScriptedLLM(tok, lambda prompt: [MALFORMED] * 5)
    output = asyncio.run(harness.run_rollout(config, tok, server, tools, make_row(), ScoredToolAgentLoop))
    assert len(server.calls) == 2 and output.response_mask[-1] == 1


def test_the_worker_survives_many_hostile_rollouts_at_once(tok, roomy_config, tools):
    """16 concurrent rollouts, each with one hostile call: every one ends with the model's next turn, and every
    tool turn is OUR message. verl catches a tool's exception itself ("Error executing tool ...") and carries on,
    so surviving alone would prove nothing about the tools: the messages are what show they never raised."""
    cases = sorted(HOSTILE)

    def script(prompt):  # row i (its question ends "Variant i.") plays hostile case i
        case = cases[int(prompt.split("Variant ")[1].split(".")[0]) % len(cases)]
        return [HOSTILE[case][0], "#### 1"]

    server = ScriptedLLM(tok, script)

    async def go():
        rows = [make_row("1", f"{QUESTION} Variant {i}.", i) for i in range(16)]
        return await asyncio.gather(*(harness.run_rollout(roomy_config, tok, server, tools, r) for r in rows))

    for i, output in enumerate(asyncio.run(go())):
        runs = segments(tok, output)
        assert output.response_mask[-1] == 1 and runs[-1][1] == "#### 1<|im_end|>"
        tool_turns = [text for mask, text in runs if mask == 0]
        assert len(tool_turns) == 1 and "Error executing tool" not in tool_turns[0], tool_turns
        expected = HOSTILE[cases[i % len(cases)]][1]
        if expected:
            assert expected in tool_turns[0], (cases[i % len(cases)], tool_turns[0])


def test_a_number_only_in_the_tool_response_earns_nothing(tok, config, tools):
    turns = [tool_call(CALCULATOR, expression="70+2"), "I am not sure what the total is."]
    output, _ = rollout(tok, config, tools, turns)
    # verl's own decode of the whole response (what its reward manager would have scored) holds the number
    assert "<tool_response>\n72\n</tool_response>" in tok.decode(output.response_ids, skip_special_tokens=True)
    for method in ("strict", "flexible"):
        assert reward(tok, output, method=method)["score"] == 0.0


def test_a_tool_call_that_never_returns_costs_its_trajectory_and_not_the_others(tok, tmp_path):
    """verl awaits a tool with no limit, so one call that never returns would hold every trajectory of the step
    (recipes/gsm8k/tool_timeout.py says where). The recipe's bound answers it with an error, ends that trajectory
    after the tool turn, scores it 0 (its text alone would score 1) and counts it; the trajectories beside it end as
    usual. The tool is verl-loaded from a YAML, as any tool (tests/testkit/stall_faults.py: it awaits forever)."""
    from verl.tools.tool_registry import initialize_tools_from_config

    from recipes.gsm8k.tool_timeout import TOOL_TIMEOUTS, timeout_message

    yaml_file = tmp_path / "hung.yaml"
    yaml_file.write_text("tools:\n  - class_name: testkit.stall_faults.NeverAnsweringCalculator\n"
                         "    config:\n      type: native\n")
    hung = initialize_tools_from_config(str(yaml_file))
    config = harness.compose_trainer_config("calculator", ("actor_rollout_ref.rollout.custom.tool_timeout_s=0.5",))
    calls = "#### 72\n" + tool_call(CALCULATOR, expression="48+24")

    def script(prompt):  # the first row calls the hung tool (its answer already written), the others answer
        return [calls, "#### 72"] if "Variant 0." in prompt else ["48+24 = 72.\n#### 72"]

    server = ScriptedLLM(tok, script)

    async def go():
        rows = [make_row("72", f"{QUESTION} Variant {i}.", i) for i in range(4)]
        runs = [harness.run_rollout(config, tok, server, hung, r, ScoredToolAgentLoop) for r in rows]
        return await asyncio.wait_for(asyncio.gather(*runs), timeout=60)

    start = time.perf_counter()
    outputs = asyncio.run(go())
    assert time.perf_counter() - start < 30
    cut, *others = outputs
    runs = segments(tok, cut)
    assert [mask for mask, _ in runs] == [1, 0], runs  # the call, its error answer; no turn after it
    assert f"<tool_response>\n{timeout_message(CALCULATOR, 0.5)}\n</tool_response>" in runs[1][1]
    extra = cut.extra_fields["reward_extra_info"]
    assert cut.reward_score == 0.0 and extra["score"] == 0.0 and extra["acc"] == 1.0 and extra[TOOL_TIMEOUTS] == 1
    for output in others:
        assert output.reward_score == 1.0 and output.extra_fields["reward_extra_info"][TOOL_TIMEOUTS] == 0


def test_the_step_metrics_count_the_calls_that_ran_past_their_bound():
    """The recipe's agent-loop manager adds them to verl's agent-loop timings (what the trainer logs per step)."""
    import numpy as np
    import torch
    from verl.protocol import DataProto

    from recipes.gsm8k.tool_timeout import TOOL_TIMEOUTS
    from recipes.gsm8k.worker import TracedAgentLoopManager

    per_trajectory = {"generate_sequences": 1.0, "tool_calls": 0.5, "compute_score": 0.1, "num_preempted": -1}
    output = DataProto.from_dict(tensors={"prompts": torch.zeros(4, 3, dtype=torch.long)},
                                 non_tensors={TOOL_TIMEOUTS: np.array([0, 1, 0, 2])})
    manager = object.__new__(TracedAgentLoopManager)  # the method reads only its arguments
    timing = manager._performance_metrics([[per_trajectory] * 2] * 2, output)
    assert timing[f"agent_loop/{TOOL_TIMEOUTS}/sum"] == 3 and timing[f"agent_loop/{TOOL_TIMEOUTS}/max"] == 2
    assert timing["agent_loop/tool_calls/max"] == 0.5  # verl's own timings are still there
