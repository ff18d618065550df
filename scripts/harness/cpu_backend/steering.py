"""Steering of the CPU smoke run's rollouts: the one place where the CPU rollout server departs from an LLM.

A tiny random model never writes a well-formed `<tool_call>`, so without help no tool would ever be called, every
reward would be equal and every GRPO advantage zero (no policy-gradient update at all). So, on the FIRST turn of
a trajectory, the server writes a well-formed hermes tool call itself instead of sampling, for the first of
every `steer_every` rollouts of the same prompt (per weights version), e.g.

    <tool_call>
    {"name": "calculator", "arguments": {"expression": "48 + 24"}}
    </tool_call><|im_end|>

The call uses the first tool the prompt's system message offers and numbers from the question; the server
scores those tokens with the model's real log-probs. Everything after is the model's own sampling and verl's
own path: the agent loop parses the call, runs the recipe's tool, and the recipe's reward pays its tool-call
bonus. Counting rollouts per prompt in one shared ledger (a Ray actor) puts steered and unsteered rollouts in
every GRPO group of size >= 2, wherever the load balancer sends them, so the advantages are never all zero.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence

LEDGER_NAME = "cpu_rollout_steering_ledger"
_TOOLS_BLOCK = re.compile(r"<tools>\n(.*?)\n</tools>", re.DOTALL)
_NUMBER = re.compile(r"\d+(?:\.\d+)?")
_LAST_USER_TURN = re.compile(r"<\|im_start\|>user\n(.*?)(?:<\|im_end\|>|\Z)", re.DOTALL)


def is_first_turn(prompt_text: str) -> bool:
    """The prompt ends where the first assistant turn starts: no assistant turn or tool response before it."""
    return prompt_text.endswith("<|im_start|>assistant\n") and prompt_text.count("<|im_start|>assistant") == 1


def forced_tool_call(prompt_text: str) -> str | None:
    """A well-formed hermes call of the prompt's first offered tool, or None when the prompt offers none."""
    block = _TOOLS_BLOCK.search(prompt_text)
    if not block:
        return None
    function = json.loads(block.group(1).splitlines()[0])["function"]
    parameters = function.get("parameters") or {}
    required = parameters.get("required") or list(parameters.get("properties") or {})
    users = _LAST_USER_TURN.findall(prompt_text)
    numbers = _NUMBER.findall(users[-1] if users else "") + ["1", "1"]
    arguments = {name: f"{numbers[0]} + {numbers[1]}" if name == "expression" else numbers[0] for name in required}
    return f'<tool_call>\n{json.dumps({"name": function["name"], "arguments": arguments})}\n</tool_call>'


def prompt_key(prompt_ids: Sequence[int]) -> str:
    return hashlib.sha1(",".join(map(str, prompt_ids)).encode()).hexdigest()


class SteeringLedger:
    """Shared by all rollout servers of a run (a named Ray actor): counts first turns per prompt and weights
    version and says which to steer. Ray runs an actor's methods one at a time, so counts never race."""

    def __init__(self, steer_every: int) -> None:
        if steer_every < 1:
            raise ValueError(f"steer_every must be >= 1, not {steer_every}")
        self.steer_every = steer_every
        self.version = None
        self.counts: dict[str, int] = {}

    def claim(self, key: str, weights_version) -> bool:
        if weights_version != self.version:  # a new step: forget the old prompts
            self.version, self.counts = weights_version, {}
        seen = self.counts.get(key, 0)
        self.counts[key] = seen + 1
        return seen % self.steer_every == 0
