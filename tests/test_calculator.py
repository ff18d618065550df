"""tools/calculator.py, the tool verl's agent loop calls: its answers and metrics, its schema, and its evaluation in a
work process (a bug there costs one call). The arithmetic itself, in this process: tests/test_arithmetic.py."""

import asyncio
import re

import pytest

from tools.arithmetic import calculate

pytestmark = pytest.mark.integration  # the calculator evaluates in a work process


@pytest.fixture(scope="module")
def calculator_tool():
    from verl.tools.tool_registry import initialize_tools_from_config

    from recipes.gsm8k.tool_sets import get_tool_set

    (tool,) = initialize_tools_from_config(str(get_tool_set("calculator").config_path))
    return tool


def _call(tool, parameters, create_kwargs=None):
    async def go():
        instance_id, _ = await tool.create(create_kwargs=create_kwargs or {"row_index": 3})
        try:
            return await tool.execute(instance_id, parameters)
        finally:
            await tool.release(instance_id)

    return asyncio.run(go())


@pytest.mark.parametrize(
    "parameters, text, metrics",
    [
        ({"expression": "48/2"}, "24", {"ok": 1}),
        ({"expression": "1/0"}, "Error: division by zero", {"ok": 0, "error": "bad_expression"}),
        ({"expression": 7}, "Error: the expression must be a string", {"ok": 0, "error": "bad_expression"}),
        ({}, "missing argument", {"ok": 0, "error": "bad_arguments"}),
        (["48/2"], "missing argument", {"ok": 0, "error": "bad_arguments"}),
    ],
)
def test_calculator_tool_answers_with_text_and_metrics(calculator_tool, parameters, text, metrics):
    response, reward, got_metrics = _call(calculator_tool, parameters)
    assert response.text.startswith(text) and reward == 0.0 and got_metrics == metrics


@pytest.mark.parametrize("work, text", [
    ("divide_by_zero", "Error: could not evaluate (ZeroDivisionError)"),
    ("exit_at_once", "Error: could not evaluate (the work process exited (exit code 3))"),
    ("allocate_past_the_limit", "Error: could not evaluate (MemoryError)"),
])
def test_calculator_tool_survives_its_own_bugs(calculator_tool, monkeypatch, work, text):
    """A bug of the evaluation (tests/testkit/pool_work.py), in its work process: the model gets a message and the
    next call a working process."""
    monkeypatch.setattr(calculator_tool, "WORK", f"testkit.pool_work:{work}")
    response, _, metrics = _call(calculator_tool, {"expression": "1+1"})
    assert response.text == text and metrics["error"] == "internal"
    monkeypatch.undo()
    assert _call(calculator_tool, {"expression": "1+1"})[0].text == "2"


def test_what_the_work_prints_is_not_its_answer(calculator_tool, monkeypatch):
    monkeypatch.setattr(calculator_tool, "WORK", "testkit.pool_work:print_then_answer")
    assert _call(calculator_tool, {"expression": "1+1"})[0].text == "42"


@pytest.mark.parametrize("expression", ["1e309", "inf", "nan", "0x10", "15% of 80"])
def test_such_input_is_an_error_message_with_nothing_logged(calculator_tool, caplog, expression):
    response, _, metrics = _call(calculator_tool, {"expression": expression})
    assert response.text.startswith("Error: ") and metrics == {"ok": 0, "error": "bad_expression"}
    assert not [r for r in caplog.records if r.levelname in ("ERROR", "WARNING")]


def test_the_schema_says_what_the_calculator_computes(calculator_tool):
    """Every example the description gives computes what the description says it does."""
    description = calculator_tool.get_openai_tool_schema().function.description
    examples = re.findall(r"([(\d][\d.,%*/+() -]*?) = (\d[\d.]*\d|\d)", description)
    assert len(examples) >= 3, description
    for expression, result in examples:
        assert calculate(expression.strip()) == result, (expression, description)
    assert "17 % 5 = 2" in description and "15% * 80 = 12" in description
