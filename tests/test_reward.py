"""recipes/gsm8k/reward.py on what the model wrote (the agent loop hands it only that: tests/test_scoring_path.py):
strict/flexible; the optional tool-call bonus."""

import pytest

from data_prep.gsm8k_rows import DATA_SOURCE, DATA_SOURCE_NO_TOOLS, SourceRecord, build_row
from recipes.gsm8k.reward import compute_score
from recipes.gsm8k.tool_sets import get_tool_set
from recipes.gsm8k.trajectory import count_tool_calls
from tools.gsm8k_reward_tool import NAME as CALC_GSM8K_REWARD

pytestmark = pytest.mark.unit

CALL = '<tool_call>\n{"name": "calculator", "arguments": {"expression": "48+24"}}\n</tool_call>'


def score(text, gt="72", **kw):
    return compute_score(DATA_SOURCE, text, gt, extra_info={}, **kw)


def test_correct_strict_answer_scores_one():
    result = score("48+24 = 72.\n#### 72")
    assert result["score"] == 1.0 and result["acc"] == 1.0 and result["format_ok"] == 1.0 and result["pred"] == "72"


@pytest.mark.parametrize("text", ["#### 72.0", "#### $72", "#### 72.", "#### 72,", "so #### 70 no wait #### 72"])
def test_strict_compares_values_and_takes_the_last_marker(text):
    assert score(text)["acc"] == 1.0


def test_strict_needs_the_marker_flexible_does_not():
    assert score("The answer is 72.")["score"] == 0.0
    assert score("The answer is 72.")["format_ok"] == 0.0
    flexible = score("The answer is 72.", method="flexible")
    assert flexible["score"] == 1.0 and flexible["acc_strict"] == 0.0 and flexible["acc_flexible"] == 1.0


def test_answers_after_tool_use_still_count():
    assert score(f"{CALL}\nSo the total is 72.\n#### 72")["score"] == 1.0


def test_tool_call_bonus_is_off_by_default_and_paid_once():
    wrong_with_calls = f"{CALL}{CALL}\n#### 70"
    assert score(wrong_with_calls)["score"] == 0.0
    result = score(wrong_with_calls, tool_call_bonus=0.1)
    assert result["score"] == pytest.approx(0.1) and result["num_tool_calls"] == 2 and result["tool_bonus"] == 0.1
    assert score(f"{CALL}\n#### 72", tool_call_bonus=0.1)["score"] == pytest.approx(1.1)
    assert score("#### 72", tool_call_bonus=0.1)["score"] == 1.0


@pytest.mark.parametrize(
    "body, expected",
    [
        ('{"name": "calculator", "arguments": {"expression": "1"}}', (1, 0)),
        ('{"name": "calc_gsm8k_reward", "arguments": {"answer": "1"}}', (1, 0)),
        ('{"name": "calculator", "arguments": "1+1"}', (0, 1)),
        ('{"name": "python", "arguments": {}}', (0, 1)),
        ('{"name": "calculator", "arguments": {', (0, 1)),
        ('{"name": {"name": "calculator"}, "arguments": {}}', (0, 1)),  # unhashable: crashed a tools-off eval
        ('{"name": ["calculator"], "arguments": {}}', (0, 1)),
        ('["calculator", {}]', (0, 1)),
    ],
)
def test_only_well_formed_calls_count(body, expected):
    assert count_tool_calls(f"<tool_call>\n{body}\n</tool_call>") == expected
    assert score(f"<tool_call>{body}</tool_call>", tool_call_bonus=0.1)["tool_bonus"] == (0.1 if expected[0] else 0.0)


@pytest.mark.parametrize("tool_set, called, paid", [
    ("calculator", "calculator", True),
    ("calculator", CALC_GSM8K_REWARD, False),  # a real tool, but not one this row offered
    ("both", CALC_GSM8K_REWARD, True),
    ("none", "calculator", False),  # a tool-free row offers nothing to call
])
def test_the_bonus_counts_only_tools_the_row_offered(tool_set, called, paid):
    row = build_row(SourceRecord("What is 70+2?", "#### 72", "t", 0), "train", get_tool_set(tool_set))
    call = f'<tool_call>{{"name": "{called}", "arguments": {{"expression": "70+2"}}}}</tool_call>'
    result = compute_score(DATA_SOURCE, f"{call}\n#### 72", "72", extra_info=row["extra_info"], tool_call_bonus=0.1)
    assert (result["tool_bonus"], result["num_tool_calls"]) == ((0.1, 1) if paid else (0.0, 0))


def test_every_sample_reports_the_same_keys_and_types():
    a, b = score("#### 72"), score("nothing", method="strict")
    assert a.keys() == b.keys()
    assert all(type(a[k]) is type(b[k]) for k in a)


def test_ref_ops_counts_the_reference_solutions_steps():
    """GSM8K's own <<expr=value>> annotations: the evaluation summary's accuracy by number of operations."""
    natalia = "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\nShe sold 48+24 = <<48+24=72>>72 clips.\n#### 72"
    assert compute_score(DATA_SOURCE, "#### 72", "72", extra_info={"answer": natalia})["ref_ops"] == 2
    assert compute_score(DATA_SOURCE, "#### 72", "72", extra_info={"answer": "48 + 24 is 72\n#### 72"})["ref_ops"] == 0
    assert score("#### 72")["ref_ops"] == 0 and compute_score(DATA_SOURCE, "#### 72", "72")["ref_ops"] == 0


def test_tools_off_rows_are_scored_and_each_trajectory_says_its_turns_tool_set_and_whether_it_called():
    """The keys that split one validation of tools-on and tools-off rows (scripts/harness/learning/
    validation_scores.py), and whose per-data_source means verl logs (tool-call rate, turns)."""
    off = build_row(SourceRecord("How many?", "#### 72", "f", 1), "test", get_tool_set("none"))
    on = build_row(SourceRecord("How many?", "#### 72", "f", 1), "test", get_tool_set("calculator"))
    without = compute_score(off["data_source"], f"{CALL}\n#### 72", "72", extra_info={**off["extra_info"],
                                                                                     "num_turns": 4})
    assert off["data_source"] == DATA_SOURCE_NO_TOOLS and without["score"] == 1.0
    # a call of a tool the row does not offer is no tool call
    assert (without["tool_set"], without["turns"], without["called_tool"], without["num_bad_tool_calls"]) == (
        "none", 4, 0.0, 1)
    with_tool = compute_score(on["data_source"], f"{CALL}\n#### 72", "72", extra_info={**on["extra_info"],
                                                                                      "num_turns": 4})
    assert (with_tool["tool_set"], with_tool["turns"], with_tool["called_tool"]) == ("calculator", 4, 1.0)


def test_wrong_data_source_and_method_are_refused():
    with pytest.raises(ValueError, match="openai/gsm8k"):
        compute_score("lighteval/MATH", "#### 1", "1")
    with pytest.raises(ValueError, match="strict' or 'flexible"):
        score("#### 72", method="fuzzy")
