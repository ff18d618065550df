"""The recipe's agent loop: verl's ToolAgentLoop, plus what a trace needs to be worth opening.

Declared in config/agent_loop.yaml under the name `tool_agent` (the rows' agent_name), which replaces
verl's registry entry of that name inside the workers. Rollouts behave exactly as with ToolAgentLoop; for
sampled (traced) trajectories the root call's output starts with the reward, whether the answer is right, the
number of tool calls and tool errors, the ground truth and the final answer, then the trajectory as chat
messages (system, user, assistant with its tool calls, tool results, ...). verl computes the training
reward only after `run` returns, outside the trace, so the loop scores traced trajectories itself with the
same reward function and kwargs the trainer uses (reward.custom_reward_function).

Importing it also registers the recipe's tool-call parser (recipes/tool_parser.py: a malformed call gets
verl's own "Invalid JSON" answer instead of silently ending the trajectory) in every worker that builds it.
"""

from __future__ import annotations

import logging
from typing import Any

from verl.experimental.agent_loop.agent_loop import AgentLoopOutput
from verl.experimental.agent_loop.tool_agent_loop import ToolAgentLoop
from verl.utils.rollout_trace import rollout_trace_op

import recipes.tool_parser  # noqa: F401  registers multi_turn.format=hermes_with_feedback in this worker
from recipes.tracing import ROLLOUT_SUMMARY, install_text_only_tracer, tracing_this_call
from recipes.trajectory import chat_messages, count_tool_errors, final_answer

logger = logging.getLogger(__name__)
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
            try:
                ROLLOUT_SUMMARY.set(self.summarize(output, kwargs))
            except Exception as err:  # a trace must never fail a rollout: the root then has verl's fields only
                logger.warning("Trace summary of one trajectory failed: %s: %s", type(err).__name__, err)
        return output

    def summarize(self, output: AgentLoopOutput, kwargs: dict) -> dict:
        """What the trace root shows, first: the reward and whether the answer is right (scored as verl's reward
        manager would score this trajectory), the counts, the final answer, then the whole trajectory as chat
        messages (recipes.trajectory.chat_messages)."""
        solution_str = self.tokenizer.decode(output.response_ids, skip_special_tokens=True)
        ground_truth = (kwargs.get("reward_model") or {}).get("ground_truth")
        raw_prompt = kwargs.get("raw_prompt")  # verl hands it over as a numpy object array
        messages = chat_messages(list(raw_prompt) if raw_prompt is not None else [], self._turns(output))
        summary: dict[str, Any] = {}
        reward_fn = _reward_fn(self.config)
        if reward_fn is not None and ground_truth is not None:
            extra_info = dict(kwargs.get("extra_info") or {})
            extra_info.update(output.extra_fields or {})
            result = reward_fn(data_source=kwargs.get("data_source"), solution_str=solution_str,
                               ground_truth=ground_truth, extra_info=extra_info)
            result = result if isinstance(result, dict) else {"score": result}
            summary.update({"reward": result.get("score"), "correct": bool(result.get("acc", result.get("score"))),
                            "pred": result.get("pred"), "num_tool_calls": result.get("num_tool_calls")})
        summary.update({"ground_truth": ground_truth, "final_answer": final_answer(messages),
                        "num_turns": output.num_turns, "num_tool_results": sum(m["role"] == "tool" for m in messages),
                        "num_tool_errors": count_tool_errors(solution_str), "messages": messages})
        return summary

    def _turns(self, output: AgentLoopOutput) -> list[tuple[bool, str]]:
        """The response split where the response mask changes (1: the model wrote it, 0: a tool turn), decoded."""
        turns: list[tuple[bool, str]] = []
        ids, mask = list(output.response_ids), list(output.response_mask)
        start = 0
        for end in range(1, len(ids) + 1):
            if end == len(ids) or mask[end] != mask[start]:
                turns.append((bool(mask[start]), self.tokenizer.decode(ids[start:end], skip_special_tokens=True)))
                start = end
        return turns
