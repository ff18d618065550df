"""Property-based tests (hypothesis) of everything that reads what a policy writes: the tool-call reader and the
recipe's parser, the reward and its answer reading, the calculator, the trace's chat view, and whole trajectories
through the recipe's agent loop. A policy under RL searches its output space for what breaks these; so does this.

The suite runs a fixed number of examples from a fixed seed (tests/testkit/fuzzing.py); `FUZZ_MINUTES=10 bash
scripts/run_tests.sh tests/test_fuzz_model_output.py` searches for ten minutes (docs/testing.md#fuzzing). Every
`@example` is a case such a search found (or an issue reported), kept so it is tried every run.
"""

from __future__ import annotations

import asyncio
import json
import re
import warnings
from decimal import Decimal
from fractions import Fraction

import pytest
from hypothesis import assume, example, given
from hypothesis import strategies as st

from data_prep.gsm8k_rows import DATA_SOURCE
from recipes.gsm8k.answers import answers_match, extract_answer, to_decimal
from recipes.gsm8k.reward import compute_score
from recipes.gsm8k.reward_keys import REWARD_KEYS
from recipes.gsm8k.trajectory import UNREADABLE_NAME, chat_messages, read_tool_call, valid_text
from testkit.fuzzing import call_bodies, expressions, fuzz, json_values, literals, model_text, turns
from tools.arithmetic import MAX_ABS_VALUE, CalcError, calculate, format_number

pytestmark = pytest.mark.integration  # the calculator's own property runs its work processes

_NUMBER = re.compile(r"-?\d+(\.\d{1,10})?")


def is_text(value: str) -> bool:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


@pytest.fixture(scope="module")
def tok():
    from harness.qwen_tokenizer import load_qwen25_tokenizer

    return load_qwen25_tokenizer()


# ---- the tool-call reader -----------------------------------------------------------------------------------------


@fuzz(examples=300)
@given(call_bodies())
@example('{"name": "\\ud800", "arguments": {}}')  # verl answered Unknown function '\ud800', which raised
@example('{"name": "calc\\ud83d", "arguments": {"x": "\\ude00"}}')  # a pair split by text
@example('{"name": "calculator", "arguments": {"\\udfff": [1e99999]}}')
def test_a_call_is_read_as_valid_text_and_verl_can_only_answer_it(body):
    name, arguments = read_tool_call(body)
    assert isinstance(name, str) and isinstance(arguments, str) and is_text(name) and is_text(arguments)
    try:  # what verl's ToolAgentLoop._call_tool does with them: it catches only these two
        json.loads(arguments)
    except (json.JSONDecodeError, TypeError):
        pass
    try:
        call = json.loads(body)
    except (ValueError, RecursionError):
        return
    if isinstance(call, dict) and isinstance(call.get("name"), str) and "arguments" in call:
        assert name == valid_text(call["name"])
        assert json.dumps(json.loads(arguments)) == json.dumps(valid_text(call["arguments"]))  # NaN is NaN
    elif not isinstance(call, dict) or not call.get("name"):
        assert name == UNREADABLE_NAME or not isinstance(call, dict)


@fuzz(examples=60)
@given(turns())
@example('<tool_call>{"name": "\\ud800", "arguments": {}}</tool_call>')
@example("<tool_call><tool_call></tool_call><|im_end|>")
def test_the_parser_reads_every_call_of_a_turn_as_valid_text(tok, text):
    from recipes.gsm8k.tool_parser import HermesWithFeedbackToolParser, ValidTextCalls
    from recipes.gsm8k.trajectory import tool_call_bodies

    ids = tok.encode(text, add_special_tokens=False) + [tok.eos_token_id]
    for parser in (HermesWithFeedbackToolParser(tok), ValidTextCalls(_verl_hermes(tok))):
        content, calls = asyncio.run(parser.extract_tool_calls(ids))
        assert is_text(content) and all(is_text(c.name) and is_text(c.arguments) for c in calls)
    content, calls = asyncio.run(HermesWithFeedbackToolParser(tok).extract_tool_calls(ids))
    assert len(calls) == len(tool_call_bodies(tok.decode(ids)))  # every call answered, malformed ones too


def _verl_hermes(tok):
    from verl.experimental.agent_loop.tool_parser import HermesToolParser

    return HermesToolParser(tok)


# ---- the reward and its answers ----------------------------------------------------------------------------------


@fuzz(examples=300)
@given(model_text, st.sampled_from(["72", "1,080", "0.5", "-3", "1e9999999", "99999999999999999999"]),
       st.sampled_from(["strict", "flexible"]), st.sampled_from([0.0, 0.1]))
@example("#### 9" + "9" * 5000, "72", "strict", 0.1)
@example("#### 1" + ",000" * 2000, "1e9999999", "flexible", 0.0)
def test_the_reward_reads_any_text_with_every_key_and_type(text, truth, method, bonus):
    extra_info = {"tools_kwargs": {"calculator": {}}, "answer": "<<48/2=24>> #### 72", "num_turns": 3}
    result = compute_score(DATA_SOURCE, text, truth, extra_info=extra_info, method=method, tool_call_bonus=bonus)
    assert set(result) == set(REWARD_KEYS)
    assert result["acc"] in (0.0, 1.0) and result["score"] == result["acc"] + result["tool_bonus"]
    assert result["tool_bonus"] in (0.0, bonus) and isinstance(result["pred"], str) and is_text(result["pred"])
    assert result["num_tool_calls"] >= 0 and result["num_bad_tool_calls"] >= 0


@fuzz(examples=300)
@given(st.text(st.characters(exclude_categories=("Cs",), exclude_characters="<"), max_size=200),
       st.integers(-10**12, 10**12))
@example("It is 5,", 72)
@example("#### 1\n####", 7)
def test_an_answer_written_last_is_the_answer(text, truth):
    """Whatever came before (no tool call in it), `#### <truth>` on its own last line is read and is right."""
    result = compute_score(DATA_SOURCE, f"{text}\n#### {truth}", str(truth))
    assert result["acc"] == 1.0 and result["pred"] == str(truth), result


@fuzz(examples=300)
@given(st.decimals(allow_nan=False, allow_infinity=False, places=2, min_value=-10**9, max_value=10**9),
       st.booleans(), st.booleans(), st.sampled_from(["", ".", ".00"]))
def test_a_number_matches_however_gsm8k_writes_it(value, commas, dollars, tail):
    """72, $72, 1,080 and 72.00 are the same answer as the ground truth's plain digits."""
    sign, digits = ("-" if value < 0 else ""), f"{abs(value):{',' if commas else ''}f}"
    if tail and "." not in digits:
        digits += tail
    written = f"{sign}{'$' if dollars else ''}{digits}"
    assert answers_match(written, str(value)), written
    assert to_decimal(extract_answer(f"#### {written}")) == value


@fuzz(examples=200)
@given(model_text)
def test_what_is_read_as_an_answer_is_a_number(text):
    for method in ("strict", "flexible"):
        found = extract_answer(text, method)
        assert found is None or to_decimal(found) is not None


# ---- the calculator --------------------------------------------------------------------------------------------


@fuzz(examples=400)
@given(expressions)
@example("1e9999999")
@example("0.1e99999999-1")
@example("1+\ud800")
@example("1\x00")
@example("9" * 199)
@example("(" * 100 + "1" + ")" * 100)
@example("1if 2")  # found by a search: Python's SyntaxWarning about the text was logged by every worker
def test_any_expression_is_a_number_or_a_one_line_refusal(expression):
    with warnings.catch_warnings(record=True) as logged:
        warnings.simplefilter("always")
        try:
            result = calculate(expression)
        except CalcError as err:
            assert "\n" not in str(err) and is_text(str(err))
            result = None
    assert not logged, [str(w.message) for w in logged]
    if result is not None:
        assert _NUMBER.fullmatch(result) and abs(Fraction(result)) <= MAX_ABS_VALUE, result


@fuzz(examples=400)
@given(literals)
@example("1e-41")
@example("1E1000000")  # the oracle's own finding: Decimal's abs() overflows past its exponent bounds
@example("000.000e999999999")
@example("1_0.5e1")
def test_a_literal_is_read_exactly_or_refused_as_its_size_says(literal):
    """Decimal reads a literal without building its digits (its exponent stays an exponent): the oracle."""
    try:
        exact = Decimal(literal.replace("_", ""))
    except ArithmeticError:
        exact = None
    assume(exact is not None and re.fullmatch(r"[\d_.eE+-]+", literal) and exact.is_finite())
    size = exact.copy_abs()  # no context: an exponent past decimal's own bounds is compared, not rounded
    try:
        result = calculate(literal)
    except CalcError as err:
        assert size > Decimal(10) ** 30 or "cannot" in str(err) or "unsupported" in str(err), (literal, err)
        return
    assert size <= Decimal(10) ** 30
    if size < Decimal(10) ** -40:
        assert result == "0"
    else:
        assert result == format_number(Fraction(exact)), (literal, result)


@fuzz(examples=60)
@given(st.one_of(st.fixed_dictionaries({"expression": expressions}), st.dictionaries(st.text(max_size=12), json_values),
                 json_values))
@example({"expression": "1e999999999"})
@example({"expression": "\ud800"})
@example({"expression": 10**5000})
def test_the_calculator_tool_answers_any_arguments(calculator, parameters):
    from verl.tools.schemas import ToolResponse

    async def call():
        instance_id, _ = await calculator.create(create_kwargs={"row_index": 0})
        try:
            return await calculator.execute(instance_id, parameters)
        finally:
            await calculator.release(instance_id)

    response, reward, metrics = asyncio.run(call())
    assert isinstance(response, ToolResponse) and isinstance(response.text, str) and response.text
    assert reward == 0.0 and metrics["ok"] in (0, 1) and metrics.get("error") != "internal", (parameters, response)


@pytest.fixture(scope="module")
def calculator():
    from verl.tools.tool_registry import initialize_tools_from_config

    from recipes.gsm8k.tool_sets import get_tool_set

    (tool,) = initialize_tools_from_config(str(get_tool_set("calculator").config_path))
    return tool


# ---- the trace's chat view ---------------------------------------------------------------------------------------


@fuzz(examples=200)
@given(st.lists(st.tuples(st.booleans(), turns()), max_size=6))
@example([(True, '<tool_call>{"name": "\\ud800", "arguments": {"\\udc00": 1}}</tool_call>'),
          (False, "<tool_response>\n</tool_response><tool_response>")])
def test_the_chat_view_of_any_trajectory_is_a_valid_chat(turns_):
    from recipes.tracing.shaping import sanitize

    prompt = [{"role": "system", "content": "s"}, {"role": "user", "content": "q"}]
    messages = chat_messages(prompt, turns_)
    assert messages[:2] == prompt and all(m["role"] in ("system", "user", "assistant", "tool") for m in messages)
    calls = {c["id"] for m in messages for c in m.get("tool_calls", ())}
    assert all(m["tool_call_id"] in calls for m in messages if "tool_call_id" in m)
    payload = json.dumps(sanitize({"messages": messages}), ensure_ascii=False)  # what weave sends
    payload.encode("utf-8")


@fuzz(examples=200)
@given(json_values, st.lists(st.integers(0, 150_000), max_size=40))
def test_the_trace_payload_of_any_value_is_json(value, token_ids):
    from recipes.tracing.shaping import sanitize

    clean = sanitize({"inputs": value, "prompt_ids": token_ids, "other": {"numbers": token_ids}})
    json.dumps(clean)
    assert "prompt_ids" not in clean or clean["prompt_ids"] == f"<{len(token_ids)} token ids>"


# ---- whole trajectories ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def loop_parts(tok):
    from harness import agent_loop_inprocess as harness

    config = harness.compose_trainer_config("both", ("actor_rollout_ref.rollout.response_length=2048",))
    return config, harness.load_tools(config)


@fuzz(examples=15)
@given(st.lists(turns(), min_size=1, max_size=3))
@example(['<tool_call>{"name": "\\ud800", "arguments": {}}</tool_call>', "#### 72"])
@example(['<tool_call>{"name": "calculator", "arguments": {"expression": "1e9999999"}}</tool_call>'])
def test_any_script_is_a_trajectory_verl_can_batch(tok, loop_parts, script):
    """Whatever the model writes: the loop ends normally (no error to end it), its ids and masks agree, its reward
    is one the reward can give, and every reward key is there."""
    from data_prep.gsm8k_rows import SourceRecord, build_row
    from harness import agent_loop_inprocess as harness
    from harness.standins.scripted_llm import ScriptedLLM
    from recipes.gsm8k.agent_loop import ScoredToolAgentLoop
    from recipes.gsm8k.failures import ERROR_REASON, TRAJECTORY_ERRORS
    from recipes.gsm8k.tool_sets import get_tool_set

    config, tools = loop_parts
    row = build_row(SourceRecord("How many?", "#### 72", "test", 0), "train", get_tool_set("both"))
    output = asyncio.run(harness.run_rollout(config, tok, ScriptedLLM(tok, lambda _: script), tools, row,
                                             ScoredToolAgentLoop))
    extra = output.extra_fields["reward_extra_info"]
    assert extra[TRAJECTORY_ERRORS] == 0, extra[ERROR_REASON]
    assert len(output.response_ids) == len(output.response_mask) <= config.actor_rollout_ref.rollout.response_length
    assert output.response_mask[0] == 1 and set(output.response_mask) <= {0, 1}
    assert set(REWARD_KEYS) <= set(extra) and output.reward_score == extra["score"] in (0.0, 0.1, 1.0, 1.1)
    assert is_text(tok.decode(output.prompt_ids + output.response_ids))
