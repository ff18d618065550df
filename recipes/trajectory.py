"""Reading a decoded multi-turn trajectory: what the model wrote, its tool calls, and what the tools answered.

The one home for this parsing: the reward (recipes/reward.py), the traced summary of each rollout
(recipes/traced_agent_loop.py, which shows it as chat messages) and the offline reports
(recipes/rollout_report/) all read trajectories here.

verl's reward manager decodes the whole response with special tokens skipped, so a tool turn looks like

    <tool_call>{...}</tool_call>\\nuser\\n<tool_response>\\n24\\n</tool_response>\\nassistant\\n48+24 is 72.\\n#### 72

(the role names are what is left of the skipped <|im_start|> tokens). The last tool response may have been
cut by the response-length limit and have no closing tag.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection

from recipes.constants import CALC_GSM8K_REWARD, CALCULATOR

KNOWN_TOOLS = frozenset({CALCULATOR, CALC_GSM8K_REWARD})
# A whole tool turn, with the role words around it.
_TOOL_TURN = re.compile(r"(?:\nuser\n)?<tool_response>.*?(?:</tool_response>(?:\nassistant\n)?|\Z)", re.DOTALL)
_TOOL_RESPONSE_TEXT = re.compile(r"<tool_response>\n?(.*?)\n?(?:</tool_response>|\Z)", re.DOTALL)
_TOOL_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
# How our tools (Error: ...) and verl's agent loop (unknown tool, unparsable arguments) report a failed call.
TOOL_ERROR_PREFIXES = ("Error", "Unknown function", "Invalid JSON")


def model_written_text(solution_str: str) -> str:
    """The trajectory with every tool turn removed: only what the model wrote."""
    return _TOOL_TURN.sub("", solution_str)


def tool_responses(solution_str: str) -> list[str]:
    return _TOOL_RESPONSE_TEXT.findall(solution_str)


def count_tool_errors(solution_str: str) -> int:
    return sum(text.startswith(TOOL_ERROR_PREFIXES) for text in tool_responses(solution_str))


def chat_messages(prompt: list[dict], turns: list[tuple[bool, str]]) -> list[dict]:
    """The trajectory as OpenAI-style chat messages, the shape the Weave UI shows as a chat: the prompt's
    messages, then per turn an assistant message (its tool calls as structured `tool_calls`) or the tool
    results that answered it (role "tool", one per <tool_response>, linked by `tool_call_id`).

    `turns`: (written_by_the_model, text) for each run of the response, as the response mask splits it, each
    decoded with special tokens skipped. A tool turn's role words and tags are dropped; a turn without a
    <tool_response> (not one the recipe's tools make) becomes a user message."""
    messages = [{"role": str(m["role"]), "content": m["content"]} for m in prompt]
    pending: list[dict] = []  # the last assistant's calls not answered yet, in order
    for by_model, text in turns:
        if by_model:
            message = assistant_message(text, first_call_index=sum(len(m.get("tool_calls", ())) for m in messages))
            pending = list(message.get("tool_calls", ()))
            messages.append(message)
            continue
        results = tool_responses(text)
        if not results:
            messages.append({"role": "user", "content": text.strip()})
        for result in results:
            call = pending.pop(0) if pending else None
            message = {"role": "tool", "content": result}
            if call:
                message.update(tool_call_id=call["id"], name=call["function"]["name"])
            messages.append(message)
    return messages


def assistant_message(text: str, first_call_index: int = 0) -> dict:
    """One assistant turn: its text, and each well-formed <tool_call> as an OpenAI tool call (arguments as a
    JSON string). A malformed call stays in the text as the model wrote it (the tool turn says what was wrong)."""
    calls = []

    def take(match: re.Match) -> str:
        try:
            call = json.loads(match.group(1))
        except json.JSONDecodeError:
            return match.group(0)
        if not (isinstance(call, dict) and isinstance(call.get("name"), str)):
            return match.group(0)
        calls.append({"id": f"call_{first_call_index + len(calls)}", "type": "function",
                      "function": {"name": call["name"], "arguments": json.dumps(call.get("arguments", {}))}})
        return ""

    content = _TOOL_CALL.sub(take, text).strip()
    message: dict = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = calls
    return message


def final_answer(messages: list[dict]) -> str:
    """The text of the model's last turn (its tool calls left out); empty if it wrote none."""
    last = next((m for m in reversed(messages) if m["role"] == "assistant"), None)
    return (last or {}).get("content") or ""


def offered_tools(extra_info: dict | None) -> Collection[str]:
    """The tools a row offered the model: the keys of its `tools_kwargs` (data prep writes none for a row
    without tools). Without the row's extra_info (re-scoring a dump offline), any recipe tool counts."""
    if not extra_info:
        return KNOWN_TOOLS
    return frozenset(extra_info.get("tools_kwargs") or {})


def count_tool_calls(model_text: str, offered: Collection[str] = KNOWN_TOOLS) -> tuple[int, int]:
    """(well-formed, malformed): well-formed = a JSON object naming an offered tool, with object arguments."""
    good = bad = 0
    for body in _TOOL_CALL.findall(model_text):
        try:
            call = json.loads(body)
        except json.JSONDecodeError:
            bad += 1
            continue
        ok = isinstance(call, dict) and call.get("name") in offered and isinstance(call.get("arguments"), dict)
        good, bad = (good + 1, bad) if ok else (good, bad + 1)
    return good, bad


def count_tool_call_tags(text: str) -> int:
    """Tool calls as tags, well-formed or not (what a dump without the reward's counts still shows)."""
    return text.count("<tool_call>")
