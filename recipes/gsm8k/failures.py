"""A trajectory that raises costs itself, not the step.

verl 0.9.1 gathers a worker's trajectories without `return_exceptions` (AgentLoopWorker.generate_sequences,
verl/experimental/agent_loop/agent_loop.py:654) and the manager its workers the same way (:1248): one exception in
one trajectory (a tool's, the tool-call parser's, the tokenizer's, verl's message merging, tracing) fails the whole
step, and the run. What a policy writes is hostile input, so the recipe ends such a trajectory instead:

- inside the recipe's agent loop (recipes/gsm8k/agent_loop.py), from the state verl had built when it raised
  (`ended_output`): the prompt and every turn merged so far, with verl's own masks, so what the model wrote is
  trained on with reward 0 as a tool timeout is;
- around the whole trajectory in the recipe's agent-loop worker (recipes/gsm8k/worker.py), for what raises outside
  the loop's `run` (verl's trace wrapper of it, the worker's post-processing): the prompt alone, nothing trained
  on (`prompt_only_output`).

Either way the trajectory scores 0, its reward extra keys say so (`trajectory_errors` 1, `error_reason` the
exception in one line: rollout and validation dumps, verl's validation metrics), the worker logs it, and the
agent-loop manager counts it per step (`timing_s/agent_loop/trajectory_errors/sum`, and one console line naming the
reasons). A step whose every trajectory ended in an error fails with those reasons: that is a bug of the setup (a
tokenizer, a server, a tool), not a policy, and training on nothing but zeros would hide it. A reward function
that raises ends the run as before (`RewardFunctionError`, recipes/gsm8k/score.py): a training reward is never
silently replaced.
"""

from __future__ import annotations

import logging
from typing import Any

from verl.experimental.agent_loop.agent_loop import AgentLoopOutput

from recipes.gsm8k.trajectory import valid_text

logger = logging.getLogger(__name__)

TRAJECTORY_ERRORS = "trajectory_errors"  # reward extra key: 1 when the trajectory ended in an error, else 0
ERROR_REASON = "error_reason"  # reward extra key: that error in one line ("" when none)
MAX_REASON_CHARS = 300
_logged_with_traceback: set[str] = set()  # exception types whose traceback this process has logged once


def failure_reason(err: BaseException) -> str:
    """The exception in one line of valid text: its type and message, cut to MAX_REASON_CHARS."""
    text = " ".join(f"{type(err).__name__}: {err}".split())
    text = valid_text(text)
    return text if len(text) <= MAX_REASON_CHARS else text[:MAX_REASON_CHARS - 3] + "..."


def log_failure(err: BaseException, where: str) -> str:
    """Log one trajectory's failure (its traceback the first time this process sees its type) and its reason."""
    reason = failure_reason(err)
    first = type(err).__name__ not in _logged_with_traceback
    _logged_with_traceback.add(type(err).__name__)
    logger.warning("A trajectory ended in an error %s and scores 0 (the step goes on): %s", where, reason,
                   exc_info=err if first else None)
    return reason


def ended_output(agent_data: Any, loop: Any, raw_prompt: Any) -> AgentLoopOutput:
    """What verl's ToolAgentLoop.run would have returned had it stopped where it raised: `agent_data` (verl's
    AgentData) holds the prompt and the turns merged so far in `prompt_ids`, the last `len(response_mask)` of them
    the response; verl assigns both together once a merge has succeeded, so they always agree. A loop that raised
    before its prompt was built (agent_data None, or no prompt_ids) hands back the prompt alone."""
    if agent_data is None or not agent_data.prompt_ids:
        return prompt_only_output(loop.tokenizer, raw_prompt, loop.rollout_config,
                                  getattr(agent_data, "metrics", None) or {})
    limit = loop.rollout_config.response_length
    cut = len(agent_data.prompt_ids) - len(agent_data.response_mask)
    prompt_ids, response_ids = agent_data.prompt_ids[:cut], agent_data.prompt_ids[cut:]
    response_mask = list(agent_data.response_mask)
    logprobs = list(agent_data.response_logprobs or [])
    if not response_ids:  # the prompt was built, nothing merged after it: one padding token nobody trains on
        response_ids, response_mask = [_end_token(loop.tokenizer)], [0]
    if logprobs or loop.rollout_config.calculate_log_probs:  # every row of a batch has them, or none
        logprobs = (logprobs + [0.0] * len(response_ids))[:len(response_ids)]
    output = AgentLoopOutput(
        prompt_ids=prompt_ids, response_ids=response_ids[:limit], response_mask=response_mask[:limit],
        response_logprobs=logprobs[:limit] if logprobs else None, multi_modal_data={},
        num_turns=agent_data.user_turns + agent_data.assistant_turns + 1, metrics=agent_data.metrics,
        routed_experts=(agent_data.routed_experts[:len(prompt_ids) + limit]
                        if agent_data.routed_experts is not None else None),
        extra_fields=agent_data.extra_fields)
    output.extra_fields.update({"turn_scores": agent_data.turn_scores, "tool_rewards": agent_data.tool_rewards})
    return output


def prompt_only_output(tokenizer: Any, raw_prompt: Any, rollout_config: Any, metrics: dict | None = None
                       ) -> AgentLoopOutput:
    """The prompt (the chat template's rendering of the row's messages, as long as the prompt may be; one token if
    even that fails) and a one-token response with mask 0: a row verl can batch and nobody trains on."""
    end = _end_token(tokenizer)
    try:
        text = tokenizer.apply_chat_template(list(raw_prompt), add_generation_prompt=True, tokenize=False)
        prompt_ids = list(tokenizer.encode(text, add_special_tokens=False))[-rollout_config.prompt_length:]
    except Exception:  # the row itself cannot be rendered: the batch still needs a row
        prompt_ids = []
    calculate = bool(rollout_config.calculate_log_probs)
    return AgentLoopOutput(prompt_ids=prompt_ids or [end], response_ids=[end], response_mask=[0],
                           response_logprobs=[0.0] if calculate else None, multi_modal_data={}, num_turns=1,
                           metrics=metrics or {}, extra_fields={"turn_scores": [], "tool_rewards": []})


def _end_token(tokenizer: Any) -> int:
    for token in (tokenizer.eos_token_id, tokenizer.pad_token_id):
        if isinstance(token, int):
            return token
    return 0
