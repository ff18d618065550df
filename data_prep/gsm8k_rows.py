"""Turn GSM8K records (question, solution) into the rows verl's tool agent loop consumes."""

from __future__ import annotations

import re
from dataclasses import dataclass

from recipes.constants import (
    ABILITY,
    AGENT_NAME,
    AGENT_NAME_NO_TOOLS,
    ANSWER_MARKER,
    DATA_SOURCE,
    DATA_SOURCE_NO_TOOLS,
    INSTRUCTION,
)
from recipes.tool_sets import ToolSet

# A GSM8K final answer: optional minus, digits with optional thousands separators, optional decimals.
_NUMBER = re.compile(r"-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?")


class InvalidRecord(ValueError):
    """A source record that cannot become a training row; the message names where it came from."""


@dataclass(frozen=True)
class SourceRecord:
    question: str
    solution: str
    location: str  # "path:line" or "dataset[split] row i": where to look when it is bad
    index: int  # position in its split, kept as extra_info.index


def extract_ground_truth(solution: str) -> str:
    """The number after the last `####`, thousands separators removed ("1,200" -> "1200")."""
    if ANSWER_MARKER not in solution:
        raise ValueError(f"no '{ANSWER_MARKER}' answer in the solution")
    raw = solution.rsplit(ANSWER_MARKER, 1)[1].strip()
    if not _NUMBER.fullmatch(raw):
        raise ValueError(f"the text after '{ANSWER_MARKER}' is not a number: {raw[:40]!r}")
    return raw.replace(",", "")


def build_row(record: SourceRecord, split: str, tool_set: ToolSet) -> dict:
    if not isinstance(record.question, str) or not record.question.strip():
        raise InvalidRecord(f"{record.location}: empty or non-text 'question'")
    if not isinstance(record.solution, str):
        raise InvalidRecord(f"{record.location}: non-text 'answer'")
    try:
        ground_truth = extract_ground_truth(record.solution)
    except ValueError as err:
        raise InvalidRecord(f"{record.location}: {err}") from None
    question = record.question.strip()
    extra_info = {
        "split": split,
        "index": record.index,
        "answer": record.solution,
        "question": question,
        "tool_set": tool_set.name,
        "need_tools_kwargs": bool(tool_set.tools),
        "interaction_kwargs": {"query": question, "ground_truth": ground_truth},
    }
    if tool_set.tools:  # parquet cannot store an empty struct: rows without tools carry no tools_kwargs
        extra_info["tools_kwargs"] = tool_set.tools_kwargs(ground_truth, record.index)
    return {
        "data_source": DATA_SOURCE if tool_set.tools else DATA_SOURCE_NO_TOOLS,
        "prompt": [
            {"role": "system", "content": tool_set.system_prompt},
            {"role": "user", "content": f"{question} {INSTRUCTION}"},
        ],
        "ability": ABILITY,
        "reward_model": {"style": "rule", "ground_truth": ground_truth},
        "extra_info": extra_info,
        "agent_name": AGENT_NAME if tool_set.tools else AGENT_NAME_NO_TOOLS,
    }
