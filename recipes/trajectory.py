"""Reading a multi-turn trajectory: what the model wrote, its tool calls, and what the tools answered.

The one home for this: the reward's input (recipes/rollout/agent_loop.py scores `model_text`), the trace's chat view of
each rollout (chat_messages) and the offline reports (recipes/rollout_report/, recipes/evaluation/) read here.

What the model wrote is what verl's response mask marks 1; a tool turn (mask 0) holds the tool's answer and the
chat template's role markers around it, whatever the template (hermes `<tool_response>` tags for Qwen2.5, an
`ipython` header for Llama 3.1). Each run of the mask is decoded with special tokens skipped, as verl decodes.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Collection

from recipes.tool_sets import known_tools

_TOOL_RESPONSE_TEXT = re.compile(r"<tool_response>\n?(.*?)\n?(?:</tool_response>|\Z)", re.DOTALL)
_TOOL_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
# A closed call, or an opened one the turn ended inside (the model stopped before </tool_call>): the agent loop
# answers both (recipes/rollout/tool_parser.py), so both are calls of the turn.
TOOL_CALL_BLOCK = re.compile(r"<tool_call>(.*?)(?:</tool_call>|\Z)", re.DOTALL)
_CALL_NAME = re.compile(r'"name"\s*:\s*"([^"]*)"')
UNREADABLE_NAME = "unreadable_tool_call"  # verl answers: Unknown function 'unreadable_tool_call'. Available: ...
# How our tools (Error: ...) and verl's agent loop (unknown tool, unparsable arguments) report a failed call.
TOOL_ERROR_PREFIXES = ("Error", "Unknown function", "Invalid JSON")


def mask_runs(mask: list[int]) -> list[tuple[bool, range]]:
    """The positions cut where the mask changes: (written_by_the_model, positions) for each run."""
    runs: list[tuple[bool, range]] = []
    start = 0
    for end in range(1, len(mask) + 1):
        if end == len(mask) or mask[end] != mask[start]:
            runs.append((bool(mask[start]), range(start, end)))
            start = end
    return runs


def split_turns(response_ids: list[int], response_mask: list[int],
                decode: Callable[[list[int]], str]) -> list[tuple[bool, str]]:
    """The response cut where the mask changes: (written_by_the_model, decoded text) for each run."""
    return [(by_model, decode(list(response_ids[span.start:span.stop])))
            for by_model, span in mask_runs(response_mask)]


def model_text(turns: list[tuple[bool, str]]) -> str:
    """What the model wrote, its turns one per line: no tool output, and no two turns glued into one number."""
    return "\n".join(text for by_model, text in turns if by_model)


def tool_responses(text: str) -> list[str]:
    """The tool answers in a text: hermes `<tool_response>` blocks (Qwen2.5's template; a display matter only)."""
    return _TOOL_RESPONSE_TEXT.findall(text)


def count_tool_errors(text: str) -> int:
    return sum(answer.startswith(TOOL_ERROR_PREFIXES) for answer in tool_responses(text))


def chat_messages(prompt: list[dict], turns: list[tuple[bool, str]]) -> list[dict]:
    """The trajectory as OpenAI-style chat messages, the shape the Weave UI shows as a chat: the prompt's
    messages, then per turn an assistant message (its tool calls as structured `tool_calls`) or the tool
    results that answered it (role "tool", one per <tool_response>, linked in order by `tool_call_id`: the agent
    loop answers every <tool_call> of a turn, malformed ones included, in the order written).

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


def read_tool_call(body: str) -> tuple[str, str]:
    """One <tool_call> body as (name, arguments as a JSON string). A body that is not a readable call keeps
    arguments no JSON loader accepts (the raw body, or "" for JSON without "arguments"), so the agent loop
    answers it with verl's "Invalid JSON ..." / "Unknown function ..." instead of dropping it."""
    try:
        call = json.loads(body)
    except json.JSONDecodeError:
        call = None
    if isinstance(call, dict) and isinstance(call.get("name"), str) and "arguments" in call:
        return call["name"], json.dumps(call["arguments"], ensure_ascii=False)
    if isinstance(call, dict):  # valid JSON, but not {"name": ..., "arguments": ...}
        return str(call.get("name") or UNREADABLE_NAME), ""
    name = _CALL_NAME.search(body)
    return (name.group(1) if name else UNREADABLE_NAME), body.strip()


def assistant_message(text: str, first_call_index: int = 0) -> dict:
    """One assistant turn: its text without the <tool_call> blocks, and each block as an OpenAI tool call
    (read as the agent loop reads it: a malformed call keeps its raw text as arguments)."""
    calls = [{"id": f"call_{first_call_index + i}", "type": "function",
              "function": dict(zip(("name", "arguments"), read_tool_call(body), strict=True))}
             for i, body in enumerate(TOOL_CALL_BLOCK.findall(text))]
    message: dict = {"role": "assistant", "content": TOOL_CALL_BLOCK.sub("", text).strip()}
    if calls:
        message["tool_calls"] = calls
    return message


def final_answer(messages: list[dict]) -> str:
    """The text of the model's last turn (its tool calls left out); empty if it wrote none."""
    last = next((m for m in reversed(messages) if m["role"] == "assistant"), None)
    return (last or {}).get("content") or ""


def offered_tools(extra_info: dict | None) -> Collection[str]:
    """The tools a row offered the model: the keys of its `tools_kwargs` (data prep writes none for a row
    without tools). Without the row's extra_info (re-scoring a dump offline), a tool of any tool set counts."""
    if not extra_info:
        return known_tools()
    return frozenset(extra_info.get("tools_kwargs") or {})


def count_tool_calls(model_text: str, offered: Collection[str] | None = None) -> tuple[int, int]:
    """(well-formed, malformed): well-formed = a JSON object naming an offered tool (default: a tool of any tool
    set), with object arguments."""
    offered = known_tools() if offered is None else offered
    good = bad = 0
    for body in _TOOL_CALL.findall(model_text):
        try:
            call = json.loads(body)
        except json.JSONDecodeError:
            bad += 1
            continue
        # a name that is not a string (a model can write an object there) is malformed, never a crash: the
        # reward runs on every rollout and an exception here ends the whole run
        ok = (isinstance(call, dict) and isinstance(call.get("name"), str) and call["name"] in offered
              and isinstance(call.get("arguments"), dict))
        good, bad = (good + 1, bad) if ok else (good, bad + 1)
    return good, bad


def count_tool_call_tags(text: str) -> int:
    """Tool calls as tags, well-formed or not (what a dump without the reward's counts still shows)."""
    return text.count("<tool_call>")
