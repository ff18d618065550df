"""`calculator`: an honest arithmetic tool for verl's ToolAgentLoop. It sees only the expression the model
sends (never the row's answer) and answers with the exact result or a short error message.

The evaluation (tools/arithmetic.py, whose work is bounded before it is done) runs in one of this process's work
processes (tools/process_pool.py), not in the agent loop's event loop: whatever an expression costs, the loop serves
the other trajectories meanwhile, and the call's deadline ends it: the agent loop's `tool_timeout_s` (which cancels
the call) or the calculator's own EVALUATION_TIMEOUT_S, whichever comes first; the process is killed and replaced."""

from __future__ import annotations

import logging
from typing import Any

from verl.tools.schemas import OpenAIFunctionToolSchema, ToolResponse
from verl.utils.rollout_trace import rollout_trace_op

from tools.arithmetic import CalcError, check_size
from tools.process_pool import WorkFailed, WorkRefused, WorkTimedOut, pool_for
from tools.quiet_tool import QuietTool

logger = logging.getLogger(__name__)
EVALUATION_TIMEOUT_S = 10.0  # a bounded evaluation takes well under a millisecond; this bounds one that is not


class CalculatorTool(QuietTool):
    """Stateless: verl creates, executes and releases an instance per call; nothing to keep between them."""

    WORK = "tools.arithmetic:calculate"  # what a work process runs: expression -> formatted result, or CalcError

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
            check_size(expression)  # here: what is too long to send is refused before it is sent
            text = await pool_for(self.WORK, (CalcError.__name__,)).run(expression, timeout_s=EVALUATION_TIMEOUT_S)
            return ToolResponse(text=str(text)), 0.0, {"ok": 1}
        except (CalcError, WorkRefused) as err:
            return _error(f"Error: {err}", "bad_expression")
        except WorkTimedOut:
            logger.warning("calculator: %r ran past %g s and was stopped", expression, EVALUATION_TIMEOUT_S)
            return _error(f"Error: the expression took longer than {EVALUATION_TIMEOUT_S:g} s to evaluate", "timeout")
        except WorkFailed as err:  # a bug of ours must not end the rollout: tell the model, log for us
            logger.error("calculator failed on %r: %s", expression, err)
            return _error(f"Error: could not evaluate ({str(err).partition(':')[0]})", "internal")


def _error(text: str, kind: str) -> tuple[ToolResponse, float, dict]:
    return ToolResponse(text=text), 0.0, {"ok": 0, "error": kind}


NAME = CalculatorTool.SCHEMA.function.name  # for what writes calls of it (stand-in models, benchmarks)
