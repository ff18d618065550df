"""tools/gsm8k_reward_tool.py: the original recipe's answer checker, fed by the row's tools_kwargs."""

import asyncio

import pytest

from recipes.gsm8k.tool_sets import get_tool_set
from tools.gsm8k_reward_tool import NAME as CALC_GSM8K_REWARD

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def checker():
    from verl.tools.tool_registry import initialize_tools_from_config

    (tool,) = initialize_tools_from_config(str(get_tool_set(CALC_GSM8K_REWARD).config_path))
    return tool


def _check(tool, answer, create_kwargs, unpacked=False):
    async def go():
        if unpacked:
            instance_id, _ = await tool.create(**create_kwargs)
        else:  # how verl 0.9.1's ToolAgentLoop calls it
            instance_id, _ = await tool.create(create_kwargs=create_kwargs)
        try:
            return await tool.execute(instance_id, {"answer": answer})
        finally:
            await tool.release(instance_id)

    return asyncio.run(go())


def test_feedback_follows_the_rows_ground_truth(checker):
    kwargs = get_tool_set(CALC_GSM8K_REWARD).tools_kwargs("72", 0)[CALC_GSM8K_REWARD]["create_kwargs"]
    response, reward, metrics = _check(checker, "72", kwargs)
    assert (response.text, reward, metrics) == ("Your answer 72 is correct.", 1.0, {"ok": 1, "correct": 1})
    response, reward, _ = _check(checker, "72", {"ground_truth": "70"})  # another row: same answer is wrong
    assert (response.text, reward) == ("Your answer 72 is not correct.", 0.0)


@pytest.mark.parametrize("answer", ["72.0", "$72", "72.", " 72 ", "#### 72", "####72", 72, 72.0, "The answer is 72."])
def test_the_forms_a_model_prompted_the_original_way_submits_count(checker, answer):
    """verl's original tool took a string or a JSON number, with or without `#### `, and scored the last number."""
    response, reward, _ = _check(checker, answer, {"ground_truth": "72"})
    assert response.text.startswith("Your answer 72") and response.text.endswith(" is correct.") and reward == 1.0


def test_the_last_number_is_the_answer(checker):
    assert _check(checker, "#### 70, no wait, 72", {"ground_truth": "72"})[1] == 1.0
    assert _check(checker, "72 or maybe 70", {"ground_truth": "72"})[0].text == "Your answer 70 is not correct."


def test_unpacked_create_kwargs_are_accepted(checker):
    assert _check(checker, "-3", {"ground_truth": "-3"}, unpacked=True)[1] == 1.0


@pytest.mark.parametrize("answer", ["seventy-two", None, "", "####", True])
def test_non_numbers_get_a_message(checker, answer):
    response, reward, metrics = _check(checker, answer, {"ground_truth": "72"})
    assert response.text.startswith("Error: submit your final answer as a number") and reward == 0.0
    assert metrics == {"ok": 0, "error": "bad_arguments"}


def test_missing_ground_truth_is_reported_not_raised(checker):
    response, reward, metrics = _check(checker, "72", {"row_index": 1})
    assert "no reference answer" in response.text and metrics["error"] == "no_ground_truth"


def test_instances_do_not_leak_between_calls(checker):
    _check(checker, "1", {"ground_truth": "1"})
    assert checker._ground_truths == {}
