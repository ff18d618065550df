"""`calc_gsm8k_reward`: the original verl GSM8K recipe's tool, rebuilt for verl 0.9.1.

The model submits its answer; the tool compares it with the row's ground truth and says whether it is
right. That LEAKS correctness to the policy (it can probe answers before committing to one), so accuracy
measured with this tool on is not comparable with tool-free accuracy. The recipe's default tool set is
the honest `calculator`; use this one to reproduce the original recipe.

verl 0.9.1 calls create -> execute -> release for every single call, handing the row's
`tools_kwargs["calc_gsm8k_reward"]["create_kwargs"]` to create as one keyword. The step reward it returns
reaches the reward function only as extra_info["tool_rewards"]; verl never calls calc_reward.
"""

from __future__ import annotations

import logging
from typing import Any
from uuid import uuid4

from verl.tools.schemas import OpenAIFunctionToolSchema, ToolResponse
from verl.utils.rollout_trace import rollout_trace_op

from recipes.gsm8k.answers import answers_match, extract_answer
from tools.quiet_tool import QuietTool

logger = logging.getLogger(__name__)


class Gsm8kRewardTool(QuietTool):
    SCHEMA = OpenAIFunctionToolSchema.model_validate({
        "type": "function",
        "function": {
            "name": "calc_gsm8k_reward",
            "description": "Check your answer to the GSM8K problem: submit the final number and learn whether it is "
                           "correct.",
            "parameters": {
                "type": "object",
                "properties": {"answer": {"type": "string", "description": 'Your final answer as a number, e.g. 72 '
                                                                           'or -3.5 ("#### 72" is accepted too).'}},
                "required": ["answer"],
            },
        },
    })
    PROMPT = ("After solving the problem, submit your answer with the `{name}` tool at least once; it tells you "
              "whether the answer is correct, and you may revise it.")

    def __init__(self, config: dict, tool_schema):
        super().__init__(config, tool_schema)
        self._ground_truths: dict[str, str | None] = {}

    @classmethod
    def row_kwargs(cls, ground_truth: str, row_index: int) -> dict:
        return {"ground_truth": ground_truth}  # the whole point of this tool, and why it leaks correctness

    async def create(self, instance_id: str | None = None, **kwargs) -> tuple[str, ToolResponse]:
        instance_id = instance_id or uuid4().hex
        create_kwargs = kwargs.get("create_kwargs", kwargs)  # verl passes one `create_kwargs` keyword
        ground_truth = create_kwargs.get("ground_truth") if isinstance(create_kwargs, dict) else None
        self._ground_truths[instance_id] = None if ground_truth is None else str(ground_truth)
        return instance_id, ToolResponse()

    @rollout_trace_op
    async def execute(self, instance_id: str, parameters: dict[str, Any], **kwargs) -> tuple[ToolResponse, float, dict]:
        try:
            return self._check(instance_id, parameters)
        except Exception as err:  # never raise into the agent loop
            logger.exception("calc_gsm8k_reward failed")
            return ToolResponse(text=f"Error: could not check the answer ({type(err).__name__})"), 0.0, {
                "ok": 0, "error": "internal"}

    def _check(self, instance_id: str, parameters: Any) -> tuple[ToolResponse, float, dict]:
        ground_truth = self._ground_truths.get(instance_id)
        if ground_truth is None:
            logger.warning("calc_gsm8k_reward: no ground_truth in the row's tools_kwargs (instance %s)", instance_id)
            return ToolResponse(text="Error: this problem has no reference answer to check against."), 0.0, {
                "ok": 0, "error": "no_ground_truth"}
        answer = parameters.get("answer") if isinstance(parameters, dict) else None
        # As verl's original tool: "72", "#### 72", a JSON number, "$1,080" or "The answer is 72." all count; the
        # last number is the answer ("flexible"), compared by value.
        number = None if answer is None or isinstance(answer, bool) else extract_answer(str(answer), "flexible")
        if number is None:
            return ToolResponse(text=f"Error: submit your final answer as a number, e.g. {{\"answer\": \"72\"}} "
                                     f"(got {answer!r:.40})."), 0.0, {"ok": 0, "error": "bad_arguments"}
        correct = answers_match(number, ground_truth)
        verdict = "correct" if correct else "not correct"
        metrics = {"ok": 1, "correct": int(correct)}
        return ToolResponse(text=f"Your answer {number} is {verdict}."), float(correct), metrics

    async def release(self, instance_id: str, **kwargs) -> None:
        self._ground_truths.pop(instance_id, None)


NAME = Gsm8kRewardTool.SCHEMA.function.name  # for what writes calls of it (stand-in models, benchmarks)
