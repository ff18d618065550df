"""Scoring one finished trajectory where its turns are known: in the recipe's agent loop
(recipes/gsm8k/agent_loop.py), once, before verl would score it.

verl 0.9.1 scores a trajectory in its agent-loop worker only when the loop left `AgentLoopOutput.reward_score` unset
(verl/experimental/agent_loop/agent_loop.py `_compute_score`); a score set here is the training reward, and
`extra_fields["reward_extra_info"]` its extra keys (the rollout and validation dumps' columns, verl's metrics).
So the recipe does what verl's `naive` reward manager would, with the same loader and inputs, except what it
scores: the model's own turns, as the response mask marks them, never a tool's output.

- the function: the one the config names (reward.custom_reward_function path, name and reward_kwargs), through
  verl's own `get_custom_reward_fn`, loaded once per worker; verl's default scorer when no path is set;
- extra_info: the row's, plus the loop's extra fields (tool_rewards, turn_scores), num_turns and
  rollout_reward_scores, as verl's naive manager builds it;
- a synchronous function runs in the loop's default executor (as verl runs it), an `async def` one is awaited.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Callable
from typing import Any

from recipes.gsm8k.reward_keys import ACC, SCORE

_REWARD_FNS: dict[int, Callable] = {}


def reward_fn(config) -> Callable:
    """The configured reward function with its reward_kwargs bound, once per config object (one per worker)."""
    if id(config) not in _REWARD_FNS:
        from verl.trainer.ppo.reward import get_custom_reward_fn
        from verl.utils.reward_score import default_compute_score

        _REWARD_FNS[id(config)] = get_custom_reward_fn(config) or default_compute_score
    return _REWARD_FNS[id(config)]


def reward_inputs(kwargs: dict, loop_extra_fields: dict, num_turns: int, model_text: str) -> dict:
    """The reward function's keyword arguments for one trajectory (`kwargs`: what verl passed to the loop's run)."""
    extra_info = dict(kwargs.get("extra_info") or {})
    extra_info.update(loop_extra_fields or {})
    extra_info["num_turns"] = num_turns
    extra_info["rollout_reward_scores"] = kwargs.get("reward_scores") or {}
    return {"data_source": kwargs.get("data_source"), "solution_str": model_text,
            "ground_truth": (kwargs.get("reward_model") or {}).get("ground_truth"), "extra_info": extra_info}


def as_score(result: Any) -> tuple[float, dict]:
    """(score, extra info) from what a reward function returned: a dict with "score", or a number (verl's rule)."""
    if isinstance(result, dict):
        return float(result[SCORE]), dict(result)
    return float(result), {ACC: result}


class RewardFunctionError(RuntimeError):
    """The configured reward function raised: the run ends (what ends one trajectory does not catch it)."""


async def score_trajectory(config, kwargs: dict, loop_extra_fields: dict, num_turns: int,
                           model_text: str) -> tuple[float, dict, float]:
    """(score, extra info, seconds) of one trajectory. A reward function that raises ends the run, as in verl:
    a training reward must never be silently replaced (its errors are the setup's: a data_source no dataset
    declares, a bad reward_kwargs; the recipe's own reward reads any text without raising)."""
    fn = reward_fn(config)
    inputs = reward_inputs(kwargs, loop_extra_fields, num_turns, model_text)
    start = time.perf_counter()
    try:
        if inspect.iscoroutinefunction(fn):
            result = await fn(**inputs)
        else:
            result = await asyncio.get_running_loop().run_in_executor(None, lambda: fn(**inputs))
        score, extra = as_score(result)
    except Exception as err:
        raise RewardFunctionError(f"the reward function raised {type(err).__name__}: {err}") from err
    return score, extra, time.perf_counter() - start
