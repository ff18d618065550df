"""Reading numeric answers out of model text, and comparing them with GSM8K ground truth.

Shared by the reward function and the `calc_gsm8k_reward` tool so both judge an answer the same way.
Numbers compare by value ("72.0", "72", "$72" and "72." all equal "72"), unlike verl's string compare.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

from recipes.constants import ANSWER_MARKER

# A number as a model writes one: digits and commas, a decimal part. Which commas belong in a number is decided after
# (_ungrouped), so that "7,2" is read as one token that is no number, never as 72 nor as 7.
_NUMBER = r"-?\$?\d(?:[\d,]*\d)?(?:\.\d+)?"
_STRICT = re.compile(re.escape(ANSWER_MARKER) + r"\s*(" + _NUMBER + r")")
_ANY_NUMBER = re.compile(_NUMBER)
_WHOLE = re.compile(r"\d+|\d{1,3}(?:,\d{3})+")  # GSM8K's own: 1000 or 1,000 (commas between groups of three)
_STEP_ANNOTATION = re.compile(r"<<[^<>=]*=[^<>]*>>")  # GSM8K's `<<48/2=24>>`: one worked operation
_REFERENCE = re.compile(r"-?\d[\d,]*(?:\.\d+)?")  # a reference answer: no "$" or trailing "." as a model may write


def _ungrouped(number: str) -> str | None:
    """"1,000.5" -> "1000.5", "$-3" -> "-3"; None for a comma GSM8K never writes inside a number ("7,2", "1,0000")."""
    number = number.replace("$", "")
    sign = "-" if number.startswith("-") else ""
    whole, dot, fraction = number.removeprefix("-").partition(".")
    if not _WHOLE.fullmatch(whole):
        return None
    return sign + whole.replace(",", "") + dot + fraction


def reference_number(text: str) -> str | None:
    """A GSM8K reference answer ("-1,250.5") without its commas ("-1250.5"), as data prep writes the ground truth;
    None for anything else. The grammar the model's answers are read with (commas only between groups of three)."""
    return _ungrouped(text) if _REFERENCE.fullmatch(text) else None


def to_decimal(text: str | None) -> Decimal | None:
    if text is None:
        return None
    cleaned = str(text).strip().replace("$", "").rstrip(".")
    if "," in cleaned:
        cleaned = _ungrouped(cleaned)
        if cleaned is None:
            return None
    try:
        value = Decimal(cleaned)
    except InvalidOperation:
        return None
    return value if value.is_finite() else None


def extract_answer(text: str, method: str = "strict") -> str | None:
    """strict: the number after the last `####`; flexible: the last number anywhere. None when there is none, or
    when that one has a comma GSM8K would not write ("7,2")."""
    if method == "strict":
        found = _STRICT.findall(text)
    elif method == "flexible":
        found = _ANY_NUMBER.findall(text)
    else:
        raise ValueError(f"method must be 'strict' or 'flexible', not {method!r}")
    return _ungrouped(found[-1]) if found else None


def answers_match(prediction: str | None, ground_truth: str) -> bool:
    pred, truth = to_decimal(prediction), to_decimal(ground_truth)
    return pred is not None and truth is not None and pred == truth


def reference_ops(solution: str | None) -> int:
    """How many operations a reference solution works through: its `<<expr=value>>` annotations, GSM8K's own
    notation for a calculator step (0 for a solution without any, or none)."""
    return len(_STEP_ANNOTATION.findall(solution)) if isinstance(solution, str) else 0
