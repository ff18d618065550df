"""SFT transcripts rendered as verl's ToolAgentLoop renders a rollout, token for token.

With the tool, one problem has two assistant turns: a calculator call, then the answer after the tool's result;
without it, one turn: the answer straight away (what a model that skips the tool writes). The ids are what the
agent loop would hold after the same conversation: the prompt (chat template with the tool schemas, generation
prompt), each assistant turn as generated tokens ending in <|im_end|>, and each tool response as the agent loop
appends it (a "\\n" closing the assistant turn, then the tool message rendered by the template, then the next
generation prompt). The loss mask is 1 on assistant tokens only, as verl's response_mask.
tests/test_cpu_learning.py checks the result against verl's real agent loop, token by token.
"""

from __future__ import annotations

import json

from recipes.constants import CALCULATOR
from tools.arithmetic import calculate


def expression_of(row: dict) -> str:
    """The worked step of the row's answer: `347 + 589 = <<...` -> `347 + 589`."""
    return row["extra_info"]["answer"].split(" = ", 1)[0]


def call_text(expression: str) -> str:
    """A hermes tool call as Qwen2.5 writes one (the format recipes.standins.scripted_llm.tool_call also writes)."""
    return f'<tool_call>\n{json.dumps({"name": CALCULATOR, "arguments": {"expression": expression}})}\n</tool_call>'


def final_text(result: str) -> str:
    return f"#### {result}"


def scripted_turns(row: dict) -> tuple[str, str]:
    expression = expression_of(row)
    return call_text(expression), final_text(calculate(expression))


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

    def render(self, row: dict, use_tool: bool = True) -> tuple[list[int], list[int]]:
        """(input ids, loss mask) of the whole conversation: prompt, call, tool response, answer; or, without the
        tool, prompt and answer."""
        expression = expression_of(row)
        result = calculate(expression)
        prompt = self.prompt_ids(list(row["prompt"]))
        if use_tool:
            pieces = [(prompt, 0), (self.assistant_ids(call_text(expression)), 1), (self.tool_ids(result), 0),
                      (self.assistant_ids(final_text(result)), 1)]
        else:
            pieces = [(prompt, 0), (self.assistant_ids(final_text(result)), 1)]
        ids, mask = [], []
        for piece, m in pieces:
            ids += piece
            mask += [m] * len(piece)
        return ids, mask
