"""GSM8K reward for verl 0.9.1's `reward.custom_reward_function` (path=recipes/reward.py, name=compute_score).

verl's `naive` reward manager decodes the whole multi-turn response with special tokens skipped, so
`solution_str` holds the tool responses too, e.g.

    <tool_call>{...}</tool_call>\\nuser\\n<tool_response>\\n24\\n</tool_response>\\nassistant\\n48+24 is 72.\\n#### 72

Only what the model wrote may earn reward: a tool that prints the number (or a tool response the model
is fed) must not be scored as the model's answer. So every `<tool_response>` segment is cut first (also a
last one cut off by the response-length limit, which has no closing tag), then the answer is read.

Knobs (reward.custom_reward_function.reward_kwargs):
- method: "strict" (default: the number after the last `####`) or "flexible" (the last number).
- tool_call_bonus: added once when the model made at least one well-formed tool call (default 0.0).
  The known remedy for tool-use collapse (verl PR #4998 used +0.1). It is paid for wrong answers too, as
  in that PR, so that calling a tool is never worse than not calling one; it is paid once, not per call,
  so spamming calls earns nothing more.
"""

from __future__ import annotations

import json
import re

from recipes.answers import answers_match, extract_answer
from recipes.constants import CALC_GSM8K_REWARD, CALCULATOR, DATA_SOURCE

KNOWN_TOOLS = frozenset({CALCULATOR, CALC_GSM8K_REWARD})
# The tool turn as decoded: "\nuser\n<tool_response>...</tool_response>\nassistant\n" (role names left over
# from the skipped <|im_start|> tokens go too).
_TOOL_RESPONSE = re.compile(r"(?:\nuser\n)?<tool_response>.*?(?:</tool_response>(?:\nassistant\n)?|\Z)", re.DOTALL)
_TOOL_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
# The text of each tool response the model was fed, and how the recipe's tools and verl report a failed call.
_TOOL_RESPONSE_TEXT = re.compile(r"<tool_response>\n?(.*?)\n?(?:</tool_response>|\Z)", re.DOTALL)
TOOL_ERROR_PREFIXES = ("Error", "Unknown function", "Invalid JSON")


def model_written_text(solution_str: str) -> str:
    """The response with every tool-response segment removed."""
    return _TOOL_RESPONSE.sub("", solution_str)


def count_tool_calls(model_text: str) -> tuple[int, int]:
    """(well-formed, malformed) tool calls: well-formed = a JSON object naming a recipe tool with object arguments."""
    good = bad = 0
    for body in _TOOL_CALL.findall(model_text):
        try:
            call = json.loads(body)
        except json.JSONDecodeError:
            bad += 1
            continue
        ok = isinstance(call, dict) and call.get("name") in KNOWN_TOOLS and isinstance(call.get("arguments"), dict)
        good, bad = (good + 1, bad) if ok else (good, bad + 1)
    return good, bad


def tool_response_texts(solution_str: str) -> list[str]:
    """The tool responses inside a decoded multi-turn response, in order (a last one cut off by the length limit too)."""
    return _TOOL_RESPONSE_TEXT.findall(solution_str)


def count_tool_errors(solution_str: str) -> int:
    """How many tool responses report an error (bad expression, unknown tool, unparsable call)."""
    return sum(text.startswith(TOOL_ERROR_PREFIXES) for text in tool_response_texts(solution_str))


def compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: str,
    extra_info: dict | None = None,
    method: str = "strict",
    tool_call_bonus: float = 0.0,
    **kwargs,
) -> dict:
    if data_source != DATA_SOURCE:
        raise ValueError(f"recipes/reward.py scores {DATA_SOURCE!r} rows only, got data_source={data_source!r}")
    if method not in ("strict", "flexible"):
        raise ValueError(f"reward_kwargs.method must be 'strict' or 'flexible', not {method!r}")
    text = model_written_text(solution_str)
    strict_pred = extract_answer(text, "strict")
    flexible_pred = extract_answer(text, "flexible")
    acc_strict = answers_match(strict_pred, ground_truth)
    acc_flexible = answers_match(flexible_pred, ground_truth)
    correct = acc_strict if method == "strict" else acc_flexible
    good_calls, bad_calls = count_tool_calls(text)
    bonus = float(tool_call_bonus) if good_calls else 0.0
    # Every key is present for every sample, with one type each: verl batches them into reward_extra_info.
    return {
        "score": float(correct) + bonus,
        "acc": float(correct),
        "acc_strict": float(acc_strict),
        "acc_flexible": float(acc_flexible),
        "format_ok": float(strict_pred is not None),
        "num_tool_calls": good_calls,
        "num_bad_tool_calls": bad_calls,
        "tool_bonus": bonus,
        "pred": (strict_pred if method == "strict" else flexible_pred) or "",
    }
