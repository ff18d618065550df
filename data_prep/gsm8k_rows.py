"""Turn GSM8K records (question, solution) into the rows verl's tool agent loop consumes."""

from __future__ import annotations

from dataclasses import dataclass

from data_prep.rows import verl_row
from recipes.constants import ANSWER_MARKER, INSTRUCTION
from recipes.gsm8k.answers import reference_number
from recipes.gsm8k.datasets import no_tools_source
from recipes.gsm8k.tool_sets import ToolSet

# GSM8K's rows: verl routes this data_source to its own GSM8K scorer, the recipe's reward to GSM8K's answer checker
# (data_prep/gsm8k.py DATASET); rows without tools carry the other.
DATA_SOURCE = "openai/gsm8k"
DATA_SOURCE_NO_TOOLS = no_tools_source(DATA_SOURCE)


class InvalidRecord(ValueError):
    """A source record that cannot become a training row; the message names where it came from."""


@dataclass(frozen=True)
class SourceRecord:
    question: str
    solution: str
    location: str  # "path:line" or "dataset[split] row i": where to look when it is bad
    index: int  # position in its split, kept as extra_info.index


def extract_ground_truth(solution: str) -> str:
    """The number after the last `####`, thousands separators removed ("1,200" -> "1200"), read with the reward's
    number grammar (recipes/gsm8k/answers.py)."""
    if ANSWER_MARKER not in solution:
        raise ValueError(f"no '{ANSWER_MARKER}' answer in the solution")
    raw = solution.rsplit(ANSWER_MARKER, 1)[1].strip()
    number = reference_number(raw)
    if number is None:
        raise ValueError(f"the text after '{ANSWER_MARKER}' is not a number: {raw[:40]!r}")
    return number


def build_row(record: SourceRecord, split: str, tool_set: ToolSet) -> dict:
    if not isinstance(record.question, str) or not record.question.strip():
        raise InvalidRecord(f"{record.location}: empty or non-text 'question'")
    if not isinstance(record.solution, str):
        raise InvalidRecord(f"{record.location}: non-text 'answer'")
    try:
        ground_truth = extract_ground_truth(record.solution)
    except ValueError as err:
        raise InvalidRecord(f"{record.location}: {err}") from None
    return verl_row(data_source=DATA_SOURCE, question=record.question.strip(), instruction=INSTRUCTION,
                    ground_truth=ground_truth, split=split, index=record.index, tool_set=tool_set,
                    extra_info={"answer": record.solution})
