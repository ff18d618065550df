"""The recipe's agent loop: verl's ToolAgentLoop, plus what a trace needs to be worth opening, and feedback
on tool calls the parser could not read.

Declared in config/agent_loop.yaml under the name `tool_agent` (the rows' agent_name), which replaces
verl's registry entry of that name inside the workers. Rollouts behave exactly as with ToolAgentLoop; for
sampled (traced) trajectories the root call also carries the reward, whether the answer is right, the
number of tool calls and tool errors, the ground truth and the final answer. verl computes the training
reward only after `run` returns, outside the trace, so the loop scores traced trajectories itself with the
same reward function and kwargs the trainer uses (reward.custom_reward_function).

verl's hermes parser drops a `<tool_call>` whose JSON does not parse, and the trajectory then ends as if
the model had answered. Here the model is told instead (a tool message) and gets its next turn, within
the same turn and length limits: a malformed call is a mistake to learn from, not a silent stop.
"""

from __future__ import annotations

import re
from typing import Any

from verl.experimental.agent_loop.agent_loop import AgentLoopOutput
from verl.experimental.agent_loop.tool_agent_loop import AgentData, AgentState, ToolAgentLoop
from verl.utils.rollout_trace import rollout_trace_op

from recipes.tracing import ROLLOUT_SUMMARY, install_text_only_tracer, tracing_this_call

_TOOL_RESPONSES = re.compile(r"<tool_response>\n?(.*?)\n?(?:</tool_response>|\Z)", re.DOTALL)
_TOOL_ERROR_PREFIXES = ("Error", "Unknown function", "Invalid JSON")
UNPARSED_CALL_MESSAGE = ('Error: your tool call could not be parsed. Write it as <tool_call>\n{"name": "<tool>", '
                         '"arguments": {...}}\n</tool_call> with valid JSON.')


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

    async def _handle_generating_state(self, agent_data: AgentData, sampling_params: dict[str, Any],
                                       ignore_termination: bool = False) -> AgentState:
        state = await super()._handle_generating_state(agent_data, sampling_params, ignore_termination)
        if state == AgentState.TERMINATED and not agent_data.tool_calls and self._room_for_another_turn(agent_data):
            text = self.tokenizer.decode(agent_data.response_ids)
            if self.tool_parser_name == "hermes" and "<tool_call>" in text:
                return await self._answer_as_tool(agent_data, UNPARSED_CALL_MESSAGE)
        return state

    def _room_for_another_turn(self, agent_data: AgentData) -> bool:
        return (len(agent_data.response_mask) < self.response_length
                and not (self.max_assistant_turns and agent_data.assistant_turns >= self.max_assistant_turns)
                and not (self.max_user_turns and agent_data.user_turns >= self.max_user_turns))

    async def _answer_as_tool(self, agent_data: AgentData, text: str) -> AgentState:
        """Append a tool message the way ToolAgentLoop appends tool results (mask 0), then generate again."""
        previous = list(agent_data.messages)
        agent_data.messages.append({"role": "tool", "content": text})
        schemas = getattr(agent_data, "_active_tool_schemas", self.tool_schemas)
        merged, response_mask, response_logprobs = await self.ct_merge_context_msg(
            previous, agent_data.messages, agent_data.prompt_ids, agent_data.response_mask,
            agent_data.response_logprobs or None, tools=schemas)
        if len(response_mask) >= self.response_length:
            return AgentState.TERMINATED
        agent_data.prompt_ids = merged.token_ids
        agent_data.response_mask = response_mask
        if agent_data.response_logprobs:
            agent_data.response_logprobs = response_logprobs or []
        agent_data.user_turns += 1
        return AgentState.GENERATING

    def summarize(self, output: AgentLoopOutput, kwargs: dict) -> dict:
        """What the trace root shows: scored as verl's reward manager would score this trajectory."""
        solution_str = self.tokenizer.decode(output.response_ids, skip_special_tokens=True)
        ground_truth = (kwargs.get("reward_model") or {}).get("ground_truth")
        summary: dict[str, Any] = {"ground_truth": ground_truth, "num_turns": output.num_turns,
                                   "response_text": solution_str}
        tool_texts = _TOOL_RESPONSES.findall(solution_str)
        summary["num_tool_responses"] = len(tool_texts)
        summary["num_tool_errors"] = sum(text.startswith(_TOOL_ERROR_PREFIXES) for text in tool_texts)
        summary["final_answer"] = solution_str.rsplit("<tool_response>", 1)[-1].split("</tool_response>")[-1].strip()
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
