"""The recipe's agent loop: verl's ToolAgentLoop, plus what a trace needs to be worth opening.

Declared in config/agent_loop.yaml under the name `tool_agent` (the rows' agent_name), which replaces
verl's registry entry of that name inside the workers. Rollouts behave exactly as with ToolAgentLoop; for
sampled (traced) trajectories the root call also carries the reward, whether the answer is right, the
number of tool calls and tool errors, the ground truth and the final answer. verl computes the training
reward only after `run` returns, outside the trace, so the loop scores traced trajectories itself with the
same reward function and kwargs the trainer uses (reward.custom_reward_function).

Importing it also registers the recipe's tool-call parser (recipes/tool_parser.py: a malformed call gets
verl's own "Invalid JSON" answer instead of silently ending the trajectory) in every worker that builds it.
"""

from __future__ import annotations

from typing import Any

from verl.experimental.agent_loop.agent_loop import AgentLoopOutput
from verl.experimental.agent_loop.tool_agent_loop import ToolAgentLoop
from verl.utils.rollout_trace import rollout_trace_op

import recipes.tool_parser  # noqa: F401  registers multi_turn.format=hermes_with_feedback in this worker
from recipes.tracing import ROLLOUT_SUMMARY, install_text_only_tracer, tracing_this_call
from recipes.trajectory import count_tool_errors, final_turn, tool_responses

_REWARD_FNS: dict[int, Any] = {}


def _reward_fn(config) -> Any:
    """The trainer's reward function (path, name, reward_kwargs from the config), loaded once per config."""
    from verl.trainer.ppo.reward import get_custom_reward_fn

    if id(config) not in _REWARD_FNS:
        _REWARD_FNS[id(config)] = get_custom_reward_fn(config)
    return _REWARD_FNS[id(config)]


class TracedToolAgentLoop(ToolAgentLoop):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        install_text_only_tracer()

    @rollout_trace_op
    async def run(self, sampling_params: dict[str, Any], **kwargs) -> AgentLoopOutput:
        # ToolAgentLoop.run is itself traced; call the undecorated body so each trajectory has one root.
        output = await ToolAgentLoop.run.__wrapped__(self, sampling_params, **kwargs)
        if tracing_this_call():  # to the trace root only: the output must not depend on tracing (batch columns)
            ROLLOUT_SUMMARY.set(self.summarize(output, kwargs))
        return output

    def summarize(self, output: AgentLoopOutput, kwargs: dict) -> dict:
        """What the trace root shows: scored as verl's reward manager would score this trajectory."""
        solution_str = self.tokenizer.decode(output.response_ids, skip_special_tokens=True)
        ground_truth = (kwargs.get("reward_model") or {}).get("ground_truth")
        summary: dict[str, Any] = {"ground_truth": ground_truth, "num_turns": output.num_turns,
                                   "response_text": solution_str}
        summary["num_tool_responses"] = len(tool_responses(solution_str))
        summary["num_tool_errors"] = count_tool_errors(solution_str)
        summary["final_answer"] = final_turn(solution_str)
        reward_fn = _reward_fn(self.config)
        if reward_fn is None or ground_truth is None:
            return summary
        extra_info = dict(kwargs.get("extra_info") or {})
        extra_info.update(output.extra_fields or {})
        result = reward_fn(data_source=kwargs.get("data_source"), solution_str=solution_str,
                           ground_truth=ground_truth, extra_info=extra_info)
        result = result if isinstance(result, dict) else {"score": result}
        summary.update({"reward": result.get("score"), "correct": bool(result.get("acc", result.get("score"))),
                        "num_tool_calls": result.get("num_tool_calls"), "pred": result.get("pred")})
        return summary
