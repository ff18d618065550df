"""Stand-in for verl's LLM server client (what ToolAgentLoop calls as `server_manager.generate`).

There is no LLM here, so each trajectory follows a script: a list of assistant turns written as text.
Each turn is tokenized with the real tokenizer and ended with `<|im_end|>`, as a Qwen2.5 model served by
SGLang would return it, so the agent loop's parsing, masks and token merging run on real token ids.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from verl.utils.rollout_trace import rollout_trace_op
from verl.workers.rollout.replica import TokenOutput


def tool_call(name: str, **arguments) -> str:
    """One hermes-format tool call, as Qwen2.5 writes it."""
    return f'<tool_call>\n{json.dumps({"name": name, "arguments": arguments})}\n</tool_call>'


class ScriptedLLM:
    """`script_for(prompt_text) -> list of turn texts`; the n-th generate call of a trajectory gets turn n.

    Trajectories are told apart by verl's request_id (one per trajectory); the prompt text lets a script
    depend on the question, so concurrent rollouts of different rows each follow their own script. A plain class:
    verl's agent-loop worker hands its client to each loop through hydra, which would turn a dataclass into a config.
    """

    def __init__(self, tokenizer: object, script_for: Callable[[str], list[str]]) -> None:
        self.tokenizer = tokenizer
        self.script_for = script_for
        self.calls: list[dict] = []
        self._turns: dict[str, int] = {}
        self._scripts: dict[str, list[str]] = {}

    @rollout_trace_op  # traced like verl's LLMServerClient.generate
    async def generate(self, *, request_id: str, prompt_ids: list[int], sampling_params: dict, **_) -> TokenOutput:
        if request_id not in self._scripts:
            self._scripts[request_id] = self.script_for(self.tokenizer.decode(prompt_ids))
        turn = self._turns.get(request_id, 0)
        self._turns[request_id] = turn + 1
        script = self._scripts[request_id]
        text = script[turn] if turn < len(script) else "I have nothing to add."
        token_ids = self.tokenizer.encode(text, add_special_tokens=False) + [self.tokenizer.eos_token_id]
        self.calls.append({"request_id": request_id, "turn": turn, "prompt_ids": list(prompt_ids),
                           "response_ids": token_ids, "sampling_params": dict(sampling_params)})
        return TokenOutput(token_ids=token_ids, log_probs=[-0.5] * len(token_ids), stop_reason="completed")
