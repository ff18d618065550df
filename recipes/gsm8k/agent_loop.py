"""The recipe's agent loop: verl's ToolAgentLoop, which scores each trajectory once, where its turns are known, and
shows that score on the trajectory's trace.

Declared in config/agent_loop.yaml under the name `tool_agent` (the rows' agent_name), which replaces verl's
registry entry of that name inside the workers; `NoToolsAgentLoop`, the same loop offering no tools, under
`tool_agent_no_tools` (rows of the tool set "none"). Rollouts run exactly as with ToolAgentLoop; then, for EVERY
trajectory, the loop
- splits the response where verl's response mask changes (the model's turns vs tool turns) and scores what the
  model wrote with the reward function the config names (recipes/gsm8k/score.py);
- hands verl the score (`reward_score`) and the function's extra keys (`extra_fields["reward_extra_info"]`):
  verl then does not score the trajectory again, and its reward workers are not needed (config: reward.num_workers);
- for sampled (traced) trajectories, puts on the root call's output that same score, whether the answer is
  right, the tool-call and tool-error counts, the ground truth and the final answer, then the trajectory as chat
  messages (system, user, assistant with its tool calls, tool results, ...).

Each tool call is bounded in time (recipes/gsm8k/tool_timeout.py): a call that never returns ends its trajectory,
scored 0 and counted (`tool_timeouts`), instead of holding the whole step. Whatever raises while the trajectory
runs (a tool, the parser, the tokenizer, verl's message merging) ends it the same way, from the state verl had
built (recipes/gsm8k/failures.py: `trajectory_errors`, `error_reason`). What the model wrote is made valid text
before verl answers it or tokenizes it: the parser's calls (whichever parser is configured) and the tools' answers.

Importing it also registers the recipe's tool-call parser (recipes/gsm8k/tool_parser.py: a malformed call gets verl's
own "Invalid JSON" answer instead of silently ending the trajectory) in every worker that builds it.
"""

from __future__ import annotations

import logging
from typing import Any

from verl.experimental.agent_loop.agent_loop import AgentLoopOutput
from verl.experimental.agent_loop.tool_agent_loop import ToolAgentLoop
from verl.utils.rollout_trace import rollout_trace_op

from recipes.gsm8k.failures import ERROR_REASON, TRAJECTORY_ERRORS, ended_output, log_failure
from recipes.gsm8k.reward_keys import ACC, PRED, SCORE, TOOL_CALLS
from recipes.gsm8k.score import score_trajectory
from recipes.gsm8k.tool_parser import ValidTextCalls  # importing it registers format=hermes_with_feedback here
from recipes.gsm8k.tool_timeout import TOOL_TIMEOUTS, BoundedToolCalls
from recipes.gsm8k.trajectory import (
    chat_messages,
    count_tool_errors,
    final_answer,
    model_text,
    split_turns,
    valid_text,
)
from recipes.tracing.shaping import ROLLOUT_SUMMARY, install_text_only_tracer, tracing_this_call

logger = logging.getLogger(__name__)
REWARD_EXTRA_INFO = "reward_extra_info"  # verl's extra_fields key for the reward's extra keys (agent_loop.py)


class ScoredToolAgentLoop(BoundedToolCalls, ToolAgentLoop):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        install_text_only_tracer(self.tokenizer)
        self.tool_parser = ValidTextCalls(self.tool_parser)
        self.agent_data = None  # verl's state of this trajectory (local to its run): what an ended one hands back

    async def _handle_pending_state(self, agent_data, sampling_params):
        self.agent_data = agent_data
        return await super()._handle_pending_state(agent_data, sampling_params)

    async def _call_tool(self, tool_call, tools_kwargs, agent_data):
        response, reward, metrics = await super()._call_tool(tool_call, tools_kwargs, agent_data)
        if response.text:  # any tool's answer, before verl tokenizes it
            response = response.model_copy(update={"text": valid_text(response.text)})
        return response, reward, metrics

    @rollout_trace_op
    async def run(self, sampling_params: dict[str, Any], **kwargs) -> AgentLoopOutput:
        error = ""
        try:
            # ToolAgentLoop.run is itself traced; call the undecorated body so each trajectory has one root.
            output = await ToolAgentLoop.run.__wrapped__(self, sampling_params, **kwargs)
        except Exception as err:  # this trajectory ends here, from what verl had built; the step goes on
            error = log_failure(err, "in the agent loop")
            output = ended_output(self.agent_data, self, kwargs.get("raw_prompt"))
        turns = split_turns(output.response_ids, output.response_mask,
                            lambda ids: self.tokenizer.decode(ids, skip_special_tokens=True))
        output.reward_score, extra, seconds = await score_trajectory(
            self.config, kwargs, output.extra_fields, output.num_turns, model_text(turns))
        # every trajectory has every key (verl batches them)
        extra[TOOL_TIMEOUTS] = self.tool_timeouts
        extra[TRAJECTORY_ERRORS], extra[ERROR_REASON] = int(bool(error)), error
        if self.tool_timeouts or error:  # the answer, if any, was not earned by a trajectory that ran to its end
            output.reward_score = 0.0
            if SCORE in extra:
                extra[SCORE] = 0.0
        output.extra_fields[REWARD_EXTRA_INFO] = extra
        output.metrics.compute_score = seconds  # verl's agent_loop/compute_score timing
        if tracing_this_call():  # to the trace root only: the output must not depend on tracing (batch columns)
            try:
                ROLLOUT_SUMMARY.set(self.summarize(output, kwargs, turns))
            except Exception as err:  # a trace must never fail a rollout: the root then has verl's fields only
                logger.warning("Trace summary of one trajectory failed: %s: %s", type(err).__name__, err)
        return output

    @staticmethod
    def summarize(output: AgentLoopOutput, kwargs: dict, turns: list[tuple[bool, str]]) -> dict:
        """What the trace root shows, first: the score the trainer uses and whether the answer is right, the
        counts, the final answer, then the whole trajectory as chat messages
        (recipes.gsm8k.trajectory.chat_messages)."""
        extra = output.extra_fields[REWARD_EXTRA_INFO]
        raw_prompt = kwargs.get("raw_prompt")  # verl hands it over as a numpy object array
        messages = chat_messages(list(raw_prompt) if raw_prompt is not None else [], turns)
        tool_text = "".join(text for by_model, text in turns if not by_model)
        return {"reward": output.reward_score, "correct": bool(extra.get(ACC, output.reward_score)),
                "pred": extra.get(PRED), "num_tool_calls": extra.get(TOOL_CALLS),
                "ground_truth": (kwargs.get("reward_model") or {}).get("ground_truth"),
                "final_answer": final_answer(messages), "num_turns": output.num_turns,
                "num_tool_results": sum(m["role"] == "tool" for m in messages),
                "num_tool_errors": count_tool_errors(tool_text), **({"error": extra[ERROR_REASON]}
                                                                    if extra.get(ERROR_REASON) else {}),
                "messages": messages}


class NoToolsAgentLoop(ScoredToolAgentLoop):
    """The recipe's loop offering no tools, for rows of the tool set "none" (agent_name tool_agent_no_tools): no
    tool block in the prompt, and a call the model writes anyway gets verl's "Unknown function" answer and costs a
    turn, as in a run whose tool config is empty. So one launch that offers the calculator can also validate the
    same model with tools off, beside the tools-on rows."""

    def __init__(self, *args, tools=None, **kwargs):  # noqa: ARG002 - the worker's tools are not offered here
        super().__init__(*args, tools=None, **kwargs)
