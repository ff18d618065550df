"""What a policy writes is hostile input: any text costs at most its own trajectory, in linear time. A fuzz of
hostile model outputs (deep nesting, numbers past Python's digit limit, megabytes of text, thousands of tags)
through the real reward function, the recipe's real tool-call parser (verl's registry, the Qwen2.5 tokenizer)
with verl's own handling of what it returns, the chat view of a trace and the answer checker; each case at two
sizes, the larger 4x the smaller: it must not raise, and must take less than 8x the time (a quadratic one takes
16x: at these sizes it took seconds to minutes), or so little that the ratio is noise (a quarter second). Then
whole rollouts through verl's ToolAgentLoop (the recipe's loop, an LLM server stand-in) for the cases that once
ended the run."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from data_prep.gsm8k_rows import DATA_SOURCE
from harness.qwen_tokenizer import load_qwen25_tokenizer
from recipes.gsm8k.answers import extract_answer
from recipes.gsm8k.reward import compute_score
from recipes.gsm8k.reward_keys import REWARD_KEYS
from recipes.gsm8k.tool_parser import HermesWithFeedbackToolParser
from recipes.gsm8k.trajectory import chat_messages, count_tool_errors, mask_runs
from tools.calculator import NAME as CALCULATOR

pytestmark = pytest.mark.unit


def call(arguments: str, name: str = '"calculator"') -> str:
    return f'<tool_call>\n{{"name": {name}, "arguments": {arguments}}}\n</tool_call>'


# name -> (text of size n, n): n is the smaller size; the larger is 4n
HOSTILE = {
    "nested lists as arguments": (lambda n: call("[" * n + "]" * n), 1000),
    "nested objects in the expression": (lambda n: call('{"expression": ' + '{"a": ' * n + "1" + "}" * n + "}"), 1000),
    "nesting never closed": (lambda n: "<tool_call>\n" + "[" * n, 1000),
    "nesting in an unclosed call": (lambda n: '<tool_call>{"name": "calculator", "arguments": ' + "[" * n, 1000),
    "nesting in a name": (lambda n: call("{}", name="[" * n + "]" * n), 1000),
    "a number past the digit limit": (lambda n: call('{"expression": ' + "9" * n + "}"), 5000),
    "a long number in broken JSON": (lambda n: '<tool_call>{"name": "calculator", "arguments": {"expression": '
                                               + "9" * n + "</tool_call>", 5000),
    "a huge answer": (lambda n: "#### " + "9" * n, 25_000),
    "a huge answer in thousands": (lambda n: "#### 1" + ",000" * n, 6_000),
    "commas between digits": (lambda n: "#### " + "1," * n, 12_000),
    "megabytes of text": (lambda n: "The answer is not here. " * n, 11_000),
    "opening tags": (lambda n: "<tool_call>" * n, 4096),
    "opening tags with text": (lambda n: "<tool_call>2+2 " * n, 4096),
    "closing tags": (lambda n: "</tool_call>" * n, 4096),
    "closed calls": (lambda n: call('{"expression": "1+1"}') * n, 512),
    "tool response tags": (lambda n: "<tool_response>" * n, 4096),
    "answer markers": (lambda n: "#### " * n, 20_000),
    "name keys": (lambda n: "<tool_call>" + '"name": "' * n, 10_000),
    "escaped quotes": (lambda n: '<tool_call>{"name": "' + '\\"' * n + "</tool_call>", 20_000),
    "brackets in strings": (lambda n: call('{"expression": "' + "[{" * n + '"}'), 10_000),
}

EXTRA_INFO = {"tools_kwargs": {CALCULATOR: {}}, "answer": "#### 72"}
PROMPT = [{"role": "system", "content": "s"}, {"role": "user", "content": "q"}]


@pytest.fixture(scope="module")
def parser():
    return HermesWithFeedbackToolParser(load_qwen25_tokenizer())


def verl_reads(arguments: str) -> None:
    """What verl's ToolAgentLoop._call_tool does with a call's arguments: json.loads, catching only JSONDecodeError
    and TypeError (tool_agent_loop.py); anything else would end the rollout."""
    try:
        json.loads(arguments)
    except (json.JSONDecodeError, TypeError):
        pass


def everything(text: str, ids: list[int], parser) -> None:
    """Every reader of model text, as a rollout runs them."""
    result = compute_score(DATA_SOURCE, text, "72", extra_info=EXTRA_INFO, tool_call_bonus=0.1)
    assert set(result) == set(REWARD_KEYS) and result["score"] in (0.0, 0.1, 1.0, 1.1)
    compute_score(DATA_SOURCE, text, "72", extra_info=EXTRA_INFO, method="flexible")
    content, calls = asyncio.run(parser.extract_tool_calls(ids))
    assert isinstance(content, str)
    for function_call in calls:
        verl_reads(function_call.arguments)
    messages = chat_messages(PROMPT, [(True, text), (False, text)])
    assert messages[2]["role"] == "assistant"
    count_tool_errors(text)


def seconds(fn) -> float:
    best = float("inf")
    for _ in range(2):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
        if best > 2:  # slow enough to judge at once
            break
    return best


@pytest.mark.parametrize("case", list(HOSTILE))
def test_any_model_output_is_read_in_linear_time_without_raising(parser, case):
    make, n = HOSTILE[case]
    small, large = make(n), make(4 * n)
    tok = parser.tokenizer
    small_ids, large_ids = tok.encode(small), tok.encode(large)
    t_small = seconds(lambda: everything(small, small_ids, parser))
    t_large = seconds(lambda: everything(large, large_ids, parser))
    assert t_large < 5, f"{case}: {t_large:.2f} s for {len(large):,} characters"
    assert t_large < 8 * t_small or t_large < 0.25, (
        f"{case}: {t_small * 1e3:.1f} ms for {len(small):,} characters, {t_large * 1e3:.1f} ms for 4x: not linear")


@pytest.mark.parametrize("text, pred", [("#### 1,000", "1000"), ("#### 12,345,678.5", "12345678.5"),
                                        ("#### $1,080.", "1080"), ("#### 7,2", None), ("#### 1,0000", None),
                                        ("#### 1234,567", None), ("#### 1,,000", None), ("#### 5, then 6", "5")])
def test_an_answer_with_a_comma_reads_as_gsm8k_writes_numbers(text, pred):
    assert extract_answer(text, "strict") == pred
    result = compute_score(DATA_SOURCE, text, "72")
    assert result["pred"] == (pred or "") and result["format_ok"] == float(pred is not None)


def test_a_comma_that_is_not_a_thousands_separator_is_no_answer_flexibly_either():
    assert extract_answer("it is 7,2 in all", "flexible") is None
    assert extract_answer("1,000 apples and 7,2", "flexible") is None  # the last number is no number
    assert extract_answer("it costs 1,000, then", "flexible") == "1000"
    assert compute_score(DATA_SOURCE, "#### 7,2", "72")["acc"] == 0.0


# ---- whole rollouts: verl's loop, the recipe's parser, the calculator, the reward --------------------------------

ROLLOUT_CASES = ["nested lists as arguments", "a number past the digit limit", "a long number in broken JSON"]


@pytest.mark.parametrize("case", ROLLOUT_CASES)
def test_a_hostile_call_costs_one_turn_and_the_model_answers_next(case):
    from data_prep.gsm8k_rows import SourceRecord, build_row
    from harness import agent_loop_inprocess as harness
    from harness.standins.scripted_llm import ScriptedLLM
    from recipes.gsm8k.agent_loop import ScoredToolAgentLoop
    from recipes.gsm8k.tool_sets import get_tool_set

    tok, (config, tools) = load_qwen25_tokenizer(), roomy_loop()
    make, n = HOSTILE[case]
    server = ScriptedLLM(tok, lambda prompt: [make(n), "#### 72"])
    row = build_row(SourceRecord("How many?", "#### 72", "test", 0), "train", get_tool_set("both"))
    output = asyncio.run(harness.run_rollout(config, tok, server, tools, row, ScoredToolAgentLoop))
    runs = [(int(by_model), tok.decode(output.response_ids[span.start:span.stop]))
            for by_model, span in mask_runs(output.response_mask)]
    assert [mask for mask, _ in runs] == [1, 0, 1] and runs[-1][1] == "#### 72<|im_end|>", runs[1:]
    assert "Error executing tool" not in runs[1][1] and output.reward_score == 1.0


_ROOMY = []


def roomy_loop():
    """The recipe's config with room for a long call (composed once), and its tools through verl's loader."""
    from harness import agent_loop_inprocess as harness

    if not _ROOMY:
        config = harness.compose_trainer_config("both", ("actor_rollout_ref.rollout.response_length=12000",))
        _ROOMY.append((config, harness.load_tools(config)))
    return _ROOMY[0]
