"""`hermes_with_feedback`: verl's hermes tool-call parser, except that no <tool_call> goes unanswered.

verl's HermesToolParser drops a <tool_call> whose JSON does not parse (or lacks "name"/"arguments"), and
ToolAgentLoop then ends the trajectory as if the model had answered: a malformed call is a silent stop, and the
model never learns what was wrong. This parser returns such a call as a FunctionCall whose arguments are not
valid JSON, so verl's own ToolAgentLoop._call_tool answers it ("Invalid JSON in arguments for 'calculator': ...",
or "Unknown function ..." when no tool name can be read) and the model gets its next turn, with verl's own
turn limits, length budget and response masks.

Registered under that name in verl's ToolParser registry when this module is imported. Workers import it
through the recipe's agent loop (config/agent_loop.yaml -> recipes.gsm8k.agent_loop), and the recipe config
selects it with actor_rollout_ref.rollout.multi_turn.format=hermes_with_feedback.

`ValidTextCalls` wraps whichever parser the config selects (verl's own included): what it returns is valid text
(recipes.gsm8k.trajectory.valid_text) before verl answers it, tokenizes it or puts it in a message.
"""

from __future__ import annotations

from verl.experimental.agent_loop.tool_parser import FunctionCall, HermesToolParser, ToolParser
from verl.utils.ray_utils import get_event_loop
from verl.utils.rollout_trace import rollout_trace_op

from recipes.gsm8k.trajectory import read_tool_call, tool_call_bodies, valid_text, without_tool_calls

PARSER_NAME = "hermes_with_feedback"


def parse_call(body: str) -> FunctionCall:
    """One <tool_call> body as a FunctionCall; one that is not a readable call keeps arguments verl cannot load."""
    name, arguments = read_tool_call(body)
    return FunctionCall(name=name, arguments=arguments)


@ToolParser.register(PARSER_NAME)
class HermesWithFeedbackToolParser(HermesToolParser):
    @rollout_trace_op
    async def extract_tool_calls(self, responses_ids, tools=None) -> tuple[str, list[FunctionCall]]:
        text = await get_event_loop().run_in_executor(None, self.tokenizer.decode, responses_ids)
        if self.tool_call_start_token not in text:
            return text, []
        special = [t for t in self.tokenizer.all_special_tokens if t in text]  # an unclosed call runs into <|im_end|>
        bodies = [self._without(body, special) for body in tool_call_bodies(text)]
        return without_tool_calls(text), [parse_call(body) for body in bodies]

    @staticmethod
    def _without(body: str, tokens: list[str]) -> str:
        for token in tokens:
            body = body.replace(token, "")
        return body


class ValidTextCalls:
    """A tool parser whose content and calls are valid text: verl's hermes parser loads a call's JSON as is, so
    `{"name": "\\ud800", ...}` became a call of a tool named by a lone surrogate, which raised when verl tokenized
    its "Unknown function" answer. Everything else is the wrapped parser's (stop tokens, start token, ...)."""

    def __init__(self, parser: ToolParser) -> None:
        self.parser = parser

    async def extract_tool_calls(self, responses_ids, tools=None) -> tuple[str, list[FunctionCall]]:
        content, calls = await self.parser.extract_tool_calls(responses_ids, tools)
        return valid_text(content), [call.model_copy(update={"name": valid_text(call.name),
                                                             "arguments": valid_text(call.arguments)})
                                     for call in calls]

    def __getattr__(self, name: str):
        return getattr(self.parser, name)
