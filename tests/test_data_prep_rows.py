"""Unit tests for data_prep.gsm8k_rows and recipes.gsm8k.tool_sets: the answer parse and the row shape."""

import itertools
import re

import pytest

from data_prep.gsm8k_rows import (
    DATA_SOURCE,
    DATA_SOURCE_NO_TOOLS,
    InvalidRecord,
    SourceRecord,
    build_row,
    extract_ground_truth,
)
from recipes.constants import AGENT_NAME, AGENT_NAME_NO_TOOLS, INSTRUCTION
from recipes.gsm8k.answers import answers_match, extract_answer
from recipes.gsm8k.tool_sets import TOOL_SETS, get_tool_set
from tools.calculator import NAME as CALCULATOR
from tools.gsm8k_reward_tool import NAME as CALC_GSM8K_REWARD

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    "solution, expected",
    [
        ("so 48+24 = 72\n#### 72", "72"),
        ("#### 1,250", "1250"),
        ("#### 109,200,000", "109200000"),
        ("it fell\n#### -3", "-3"),
        ("#### 3.5", "3.5"),
        ("#### -0.25  \n", "-0.25"),
        ("first #### 5 then corrected\n#### 6", "6"),  # the last marker wins, as in verl's scorer
    ],
)
def test_ground_truth_is_the_number_after_the_last_marker(solution, expected):
    assert extract_ground_truth(solution) == expected


@pytest.mark.parametrize("solution", ["72", "#### ", "#### seventy-two", "#### 1,2,3", "#### 12 apples"])
def test_ground_truth_rejects_what_is_not_a_plain_number(solution):
    with pytest.raises(ValueError):
        extract_ground_truth(solution)


# GSM8K's final answers as its solutions write them: a minus, digits with commas between groups of three, decimals
GSM8K_ANSWER = re.compile(r"-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?")


def test_data_prep_reads_every_short_text_as_gsm8k_writes_answers_and_as_the_reward_reads_them():
    """Every text of up to 5 characters over digits, comma, dot, minus, "$" and space: a ground truth exactly for
    GSM8K's answers, without its commas, and the reward's strict reader reads the same number from `#### <text>`
    (one number grammar, recipes/gsm8k/answers.py)."""
    accepted = 0
    for size in range(1, 6):
        for chars in itertools.product("01,.-$ ", repeat=size):
            text = "".join(chars)
            try:
                truth = extract_ground_truth(f"#### {text}")
            except ValueError:
                assert not GSM8K_ANSWER.fullmatch(text.strip()), text
                continue
            accepted += 1
            assert GSM8K_ANSWER.fullmatch(text.strip()) and truth == text.strip().replace(",", ""), text
            assert extract_answer(f"#### {text}") == truth and answers_match(truth, text.strip()), text
    assert accepted > 100


def _record(question="How many?", solution="#### 1,000", index=7):
    return SourceRecord(question, solution, "file.jsonl:8", index)


@pytest.mark.parametrize("tool_set_name", sorted(TOOL_SETS))
def test_row_has_the_shape_the_tool_agent_loop_reads(tool_set_name):
    tool_set = get_tool_set(tool_set_name)
    row = build_row(_record(), "train", tool_set)
    # rows without tools: their own loop (offering none) and data_source (their validation metrics apart)
    assert (row["data_source"], row["agent_name"]) == (
        (DATA_SOURCE, AGENT_NAME) if tool_set.tools else (DATA_SOURCE_NO_TOOLS, AGENT_NAME_NO_TOOLS))
    assert [m["role"] for m in row["prompt"]] == ["system", "user"]
    assert row["prompt"][0]["content"] == tool_set.system_prompt
    assert row["prompt"][1]["content"] == f"How many? {INSTRUCTION}"
    assert row["reward_model"] == {"style": "rule", "ground_truth": "1000"}
    extra = row["extra_info"]
    assert (extra["split"], extra["index"], extra["tool_set"]) == ("train", 7, tool_set_name)
    assert extra["need_tools_kwargs"] is bool(tool_set.tools)
    assert set(extra.get("tools_kwargs", {})) == set(tool_set.tools)
    for tool in tool_set.tools:
        assert f"`{tool}`" in tool_set.system_prompt  # the prompt names every tool it offers


def test_only_the_answer_checker_gets_the_ground_truth():
    kwargs = get_tool_set("both").tools_kwargs("1000", 7)
    assert kwargs[CALC_GSM8K_REWARD] == {"create_kwargs": {"ground_truth": "1000"}}
    assert "1000" not in str(kwargs[CALCULATOR])
    assert kwargs[CALCULATOR] == {"create_kwargs": {"row_index": 7}}


def test_no_tools_rows_advertise_no_tool():
    row = build_row(_record(), "test", get_tool_set("none"))
    assert "tools_kwargs" not in row["extra_info"] and "tool" not in row["prompt"][0]["content"]


def test_system_prompts_differ_per_tool_set():
    prompts = {ts.system_prompt for ts in TOOL_SETS.values()}
    assert len(prompts) == len(TOOL_SETS)
    assert CALC_GSM8K_REWARD not in get_tool_set(CALCULATOR).system_prompt


@pytest.mark.parametrize(
    "record, message",
    [
        (_record(solution="no marker here"), "file.jsonl:8: no '####' answer"),
        (_record(question="  "), "file.jsonl:8: empty or non-text 'question'"),
        (_record(question=None), "file.jsonl:8: empty or non-text 'question'"),
        (_record(solution=42), "file.jsonl:8: non-text 'answer'"),
    ],
)
def test_bad_records_name_their_location(record, message):
    with pytest.raises(InvalidRecord, match=message):
        build_row(record, "train", get_tool_set(CALCULATOR))


def test_unknown_tool_set_lists_the_choices():
    with pytest.raises(ValueError, match="both, calc_gsm8k_reward, calculator, none"):
        get_tool_set("abacus")
