"""`hermes_with_feedback`: verl's hermes tool-call parser, except that no <tool_call> goes unanswered.

verl's HermesToolParser drops a <tool_call> whose JSON does not parse (or lacks "name"/"arguments"), and
ToolAgentLoop then ends the trajectory as if the model had answered: a malformed call is a silent stop, and the
model never learns what was wrong. This parser returns such a call as a FunctionCall whose arguments are not
valid JSON, so verl's own ToolAgentLoop._call_tool answers it ("Invalid JSON in arguments for 'calculator': ...",
or "Unknown function ..." when no tool name can be read) and the model gets its next turn, with verl's own
turn limits, length budget and response masks.

Registered under that name in verl's ToolParser registry when this module is imported. Workers import it
through the recipe's agent loop (config/agent_loop.yaml -> recipes.traced_agent_loop), and the recipe config
selects it with actor_rollout_ref.rollout.multi_turn.format=hermes_with_feedback.
"""

from __future__ import annotations

import json
import re

from verl.experimental.agent_loop.tool_parser import FunctionCall, HermesToolParser, ToolParser
from verl.utils.ray_utils import get_event_loop
from verl.utils.rollout_trace import rollout_trace_op

PARSER_NAME = "hermes_with_feedback"
# A closed call, or an opened one the turn ended inside (the model stopped before </tool_call>).
_CALL = re.compile(r"<tool_call>(.*?)(?:</tool_call>|\Z)", re.DOTALL)
_NAME = re.compile(r'"name"\s*:\s*"([^"]*)"')
UNREADABLE_NAME = "unreadable_tool_call"  # verl answers: Unknown function 'unreadable_tool_call'. Available: ...


def parse_call(body: str) -> FunctionCall:
    """One <tool_call> body as a FunctionCall; one that is not a readable call keeps arguments verl cannot load."""
    try:
        call = json.loads(body)
    except json.JSONDecodeError:
        call = None
    if isinstance(call, dict) and isinstance(call.get("name"), str) and "arguments" in call:
        return FunctionCall(name=call["name"], arguments=json.dumps(call["arguments"], ensure_ascii=False))
    name = _NAME.search(body)
    if isinstance(call, dict):  # valid JSON, but not {"name": ..., "arguments": ...}
        return FunctionCall(name=str(call.get("name") or UNREADABLE_NAME), arguments="")
    return FunctionCall(name=name.group(1) if name else UNREADABLE_NAME, arguments=body.strip())


@ToolParser.register(PARSER_NAME)
class HermesWithFeedbackToolParser(HermesToolParser):
    @rollout_trace_op
    async def extract_tool_calls(self, responses_ids, tools=None) -> tuple[str, list[FunctionCall]]:
        text = await get_event_loop().run_in_executor(None, self.tokenizer.decode, responses_ids)
        if self.tool_call_start_token not in text:
            return text, []
        special = [t for t in self.tokenizer.all_special_tokens if t in text]  # an unclosed call runs into <|im_end|>
        bodies = [self._without(body, special) for body in _CALL.findall(text)]
        return _CALL.sub("", text), [parse_call(body) for body in bodies]

    @staticmethod
    def _without(body: str, tokens: list[str]) -> str:
        for token in tokens:
            body = body.replace(token, "")
        return body
