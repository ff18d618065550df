"""Reading a multi-turn trajectory: what the model wrote, its tool calls, and what the tools answered.

The one home for this: the reward's input (recipes/gsm8k/agent_loop.py scores `model_text`), the trace's chat view of
each rollout (chat_messages) and the offline reports (recipes/rollout_report/, recipes/evaluation/) read here.

What the model wrote is what verl's response mask marks 1; a tool turn (mask 0) holds the tool's answer and the
chat template's role markers around it, whatever the template (hermes `<tool_response>` tags for Qwen2.5, an
`ipython` header for Llama 3.1). Each run of the mask is decoded with special tokens skipped, as verl decodes.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable, Collection

from recipes.gsm8k.tool_sets import known_tools

_TOOL_RESPONSE_TEXT = re.compile(r"<tool_response>\n?(.*?)\n?(?:</tool_response>|\Z)", re.DOTALL)
TOOL_CALL_START, TOOL_CALL_END = "<tool_call>", "</tool_call>"
_CALL_NAME = re.compile(r'"name"\s*:\s*"([^"]*)"')
UNREADABLE_NAME = "unreadable_tool_call"  # verl answers: Unknown function 'unreadable_tool_call'. Available: ...
# What a model writes is read as JSON only when json.loads cannot fail but with a JSONDecodeError, here or in verl
# (whose ToolAgentLoop catches only that): no deeper than this (a call nests 2; Python's recursion limit is 1000,
# and the stack is deeper where verl loads), and no number longer than Python's int-string limit.
MAX_JSON_DEPTH = 64
_BRACKET_OR_QUOTE = re.compile(r'[][{}"]')
_STRING_REST = re.compile(r'[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)  # after a string's opening quote, to its end
_DIGIT_RUN = re.compile(r"\d+")
# A call's arguments when its body could not be read safely: not JSON, so verl answers "Invalid JSON ...".
UNREADABLE_ARGUMENTS = "(not read: nested too deeply or a number too long)"
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


def tool_call_spans(text: str, unclosed: bool = True) -> list[tuple[int, int, int, int]]:
    """(start, body start, body end, end) of each <tool_call> block in order, in one pass (linear in the text: a
    regex that looks for </tool_call> after each of thousands of opened tags takes quadratic time). A block is
    closed by the first </tool_call> after it; `unclosed`: also one opened and never closed (the turn ended inside
    it), which then runs to the end of the text. The agent loop answers both, so both are calls of the turn."""
    spans = []
    pos = 0
    while (start := text.find(TOOL_CALL_START, pos)) != -1:
        body = start + len(TOOL_CALL_START)
        end = text.find(TOOL_CALL_END, body)
        if end == -1:
            if unclosed:
                spans.append((start, body, len(text), len(text)))
            break
        spans.append((start, body, end, end + len(TOOL_CALL_END)))
        pos = end + len(TOOL_CALL_END)
    return spans


def tool_call_bodies(text: str) -> list[str]:
    """The body of every <tool_call> block, closed or not."""
    return [text[a:b] for _, a, b, _ in tool_call_spans(text)]


def without_tool_calls(text: str) -> str:
    """The text with every <tool_call> block, closed or not, cut out."""
    kept, pos = [], 0
    for start, _, _, end in tool_call_spans(text):
        kept.append(text[pos:start])
        pos = end
    kept.append(text[pos:])
    return "".join(kept)


def nests_deeper(text: str, limit: int) -> bool:
    """Whether brackets nest deeper than `limit` in `text` outside JSON strings (an upper bound of the depth
    json.loads would reach: it stops at the first error), in one pass that stops once they do."""
    if text.count("[") + text.count("{") <= limit:  # most calls: a few brackets, no scan
        return False
    depth, pos = 0, 0
    while match := _BRACKET_OR_QUOTE.search(text, pos):
        char, pos = match.group(), match.end()
        if char == '"':  # a string's brackets do not nest: skip to its end
            rest = _STRING_REST.match(text, pos)
            if rest is None:  # never closed: the rest of the text is inside it
                return False
            pos = rest.end()
        elif char in "[{":
            depth += 1
            if depth > limit:
                return True
        else:
            depth = max(depth - 1, 0)
    return False


def json_loads_safely(text: str) -> bool:
    """Whether json.loads can fail on `text` only with a JSONDecodeError, wherever it runs: shallow enough for any
    stack and no number past Python's int-string limit (a ValueError that is not a JSONDecodeError)."""
    limit = sys.get_int_max_str_digits()
    longest = max((len(run) for run in _DIGIT_RUN.findall(text)), default=0)
    return (not limit or longest <= limit) and not nests_deeper(text, MAX_JSON_DEPTH)


def load_json(text: str) -> object | None:
    """JSON a model wrote, or None for anything else: never raises, whatever the text."""
    if not json_loads_safely(text):
        return None
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None


def valid_text(value: object) -> object:
    """`value` with every lone UTF-16 surrogate replaced by U+FFFD, in strings, dict keys and lists at any depth.

    What a model writes reaches us decoded from tokens, always valid text; but a JSON escape in it (`"\\ud800"`,
    or a pair split by other text) decodes to a lone surrogate, which no tokenizer, encoder or JSON writer with
    `ensure_ascii=False` accepts: verl answered `Unknown function '\\ud800'` and tokenizing that answer raised out of
    the agent loop. A well-formed pair stays the character it encodes."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return value.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
        return value
    if isinstance(value, dict):
        return {valid_text(k): valid_text(v) for k, v in value.items()}
    if isinstance(value, list):
        return [valid_text(v) for v in value]
    return value


def read_tool_call(body: str) -> tuple[str, str]:
    """One <tool_call> body as (name, arguments as a JSON string), both valid text (`valid_text`). A body that is
    not a readable call keeps arguments no JSON loader accepts (the raw body, "" for JSON without "arguments", or
    UNREADABLE_ARGUMENTS for a body json.loads could not fail on cleanly), so the agent loop answers it with verl's
    "Invalid JSON ..." / "Unknown function ..." instead of dropping it or raising."""
    call = load_json(body)
    if "\\u" in body:  # only a \u escape decodes to a surrogate: text decoded from tokens is valid already
        call = valid_text(call)
    if isinstance(call, dict) and isinstance(call.get("name"), str) and "arguments" in call:
        return call["name"], json.dumps(call["arguments"], ensure_ascii=False)
    if isinstance(call, dict):  # valid JSON, but not {"name": ..., "arguments": ...}
        return str(call.get("name") or UNREADABLE_NAME), ""
    name = _CALL_NAME.search(body)
    return (name.group(1) if name else UNREADABLE_NAME), (body.strip() if json_loads_safely(body)
                                                           else UNREADABLE_ARGUMENTS)


def assistant_message(text: str, first_call_index: int = 0) -> dict:
    """One assistant turn: its text without the <tool_call> blocks, and each block as an OpenAI tool call
    (read as the agent loop reads it: a malformed call keeps its raw text as arguments)."""
    calls = [{"id": f"call_{first_call_index + i}", "type": "function",
              "function": dict(zip(("name", "arguments"), read_tool_call(body), strict=True))}
             for i, body in enumerate(tool_call_bodies(text))]
    message: dict = {"role": "assistant", "content": without_tool_calls(text).strip()}
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
    for _, start, end, _ in tool_call_spans(model_text, unclosed=False):
        call = load_json(model_text[start:end])
        if call is None:  # not JSON (or JSON nobody can load safely)
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
