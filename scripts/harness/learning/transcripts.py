"""SFT transcripts rendered as verl's ToolAgentLoop renders a rollout, token for token.

A problem of d operations (one per line of its reference answer, GSM8K's `<<expr=value>>` steps) rendered with k
calls (0 <= k <= d) has k + 1 assistant turns: the calculator calls for the first k steps, each on the previous
call's result, then the answer; with k < d the answer comes straight away, without the last d - k steps (what a
model that skips the tool writes). The ids are what the agent loop would hold after the same conversation: the
prompt (chat template with the tool schemas, generation prompt), each assistant turn as generated tokens ending in
<|im_end|>, and each tool response as the agent loop appends it (a "\\n" closing the assistant turn, then the tool
message rendered by the template, then the next generation prompt). The loss mask is 1 on assistant tokens only,
as verl's response_mask. tests/test_cpu_learning.py checks the result against verl's real agent loop, token by
token, for every k of one-, two- and three-step problems.
"""

from __future__ import annotations

import json

from tools.arithmetic import calculate
from tools.calculator import NAME as CALCULATOR

_STEP = " = <<"  # `347 + 589 = <<347+589=936>>936`: the expression as written, then GSM8K's annotation


def expressions_of(row: dict) -> list[str]:
    """The worked steps of the row's answer, in order: `347 + 589 = <<...` -> `347 + 589`."""
    return [line.split(_STEP, 1)[0] for line in row["extra_info"]["answer"].splitlines() if _STEP in line]


def depth_of(row: dict) -> int:
    return len(expressions_of(row))


def call_text(expression: str) -> str:
    """A hermes tool call as Qwen2.5 writes one (the format harness.standins.scripted_llm.tool_call also
    writes)."""
    return f'<tool_call>\n{json.dumps({"name": CALCULATOR, "arguments": {"expression": expression}})}\n</tool_call>'


def final_text(result: str) -> str:
    return f"#### {result}"


def scripted_turns(row: dict, calls: int | None = None) -> list[str]:
    """The assistant turns of a transcript with `calls` calls (default: one per step), then the answer."""
    expressions = expressions_of(row)
    calls = len(expressions) if calls is None else calls
    return [call_text(e) for e in expressions[:calls]] + [final_text(calculate(expressions[-1]))]


class Renderer:
    def __init__(self, tokenizer, tool_schemas: list[dict] | None):
        self.tok = tokenizer
        self.tools = tool_schemas
        self.eos = tokenizer.eos_token_id

    def prompt_ids(self, messages: list[dict]) -> list[int]:
        ids = self.tok.apply_chat_template(messages, tools=self.tools, add_generation_prompt=True, tokenize=True)
        return list(ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids)

    def assistant_ids(self, text: str) -> list[int]:
        return self.tok.encode(text, add_special_tokens=False) + [self.eos]

    def tool_ids(self, result: str) -> list[int]:
        text = f"\n<|im_start|>user\n<tool_response>\n{result}\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
        return self.tok.encode(text, add_special_tokens=False)

    def render(self, row: dict, calls: int | None = None) -> tuple[list[int], list[int]]:
        """(input ids, loss mask) of the whole conversation: the prompt, then per call the call and the tool's
        response, then the answer. calls: how many of the steps go through the calculator (default: all)."""
        expressions = expressions_of(row)
        calls = len(expressions) if calls is None else calls
        if not 0 <= calls <= len(expressions):
            raise ValueError(f"a {len(expressions)}-step problem has 0..{len(expressions)} calls, not {calls}")
        pieces = [(self.prompt_ids(list(row["prompt"])), 0)]
        for expression in expressions[:calls]:
            pieces += [(self.assistant_ids(call_text(expression)), 1), (self.tool_ids(calculate(expression)), 0)]
        pieces.append((self.assistant_ids(final_text(calculate(expressions[-1]))), 1))
        ids, mask = [], []
        for piece, m in pieces:
            ids += piece
            mask += [m] * len(piece)
        return ids, mask
