"""`calculator`: an honest arithmetic tool for verl's ToolAgentLoop. It sees only the expression the model
sends (never the row's answer) and answers with the exact result or a short error message."""

from __future__ import annotations

import logging
from typing import Any

from verl.tools.schemas import OpenAIFunctionToolSchema, ToolResponse
from verl.utils.rollout_trace import rollout_trace_op

from tools.arithmetic import CalcError, calculate
from tools.quiet_tool import QuietTool

logger = logging.getLogger(__name__)


class CalculatorTool(QuietTool):
    """Stateless: verl creates, executes and releases an instance per call; nothing to keep between them."""

    SCHEMA = OpenAIFunctionToolSchema.model_validate({
        "type": "function",
        "function": {
            "name": "calculator",
            "description": "Evaluate an arithmetic expression exactly and return the number. Supports + - * / // ** "
                           "and parentheses, decimals and 1,000-style numbers, e.g. (16-3-4)*2 = 18 or 48/2 = 24. % "
                           "after a number is percent: 15% = 0.15, 15% * 80 = 12; between two numbers it is the "
                           "remainder: 17 % 5 = 2.",
            "parameters": {
                "type": "object",
                "properties": {"expression": {
                    "type": "string", "description": "The arithmetic expression to evaluate, e.g. 12*(3+4)/2."}},
                "required": ["expression"],
            },
        },
    })
    PROMPT = ("You can call the `{name}` tool to evaluate an arithmetic expression (+, -, *, /, **, parentheses, %). "
              "Use it for any computation you are not sure of, read its result, then continue your reasoning.")

    @rollout_trace_op
    async def execute(self, instance_id: str, parameters: dict[str, Any], **kwargs) -> tuple[ToolResponse, float, dict]:
        expression = parameters.get("expression") if isinstance(parameters, dict) else None
        if expression is None:
            return _error("missing argument: call calculator with {\"expression\": \"48/2\"}", "bad_arguments")
        try:
            return ToolResponse(text=calculate(expression)), 0.0, {"ok": 1}
        except CalcError as err:
            return _error(f"Error: {err}", "bad_expression")
        except Exception as err:  # a bug of ours must not end the rollout: tell the model, log for us
            logger.exception("calculator failed on %r", expression)
            return _error(f"Error: could not evaluate ({type(err).__name__})", "internal")


def _error(text: str, kind: str) -> tuple[ToolResponse, float, dict]:
    return ToolResponse(text=text), 0.0, {"ok": 0, "error": kind}


NAME = CalculatorTool.SCHEMA.function.name  # for what writes calls of it (stand-in models, benchmarks)
