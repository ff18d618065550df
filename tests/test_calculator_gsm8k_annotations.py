"""The calculator against the arithmetic GSM8K's own solutions use: every `<<expr=result>>` annotation in
the real train set, compared with an exact Fraction evaluation done independently here."""

import json
import re
from collections import Counter
from fractions import Fraction

import pytest

from tools.arithmetic import CalcError, calculate, format_number

pytestmark = pytest.mark.unit

ANNOTATION = re.compile(r"<<([^=<>]*)=([^<>]*)>>")
PLAIN_ARITHMETIC = re.compile(r"^[0-9.\s+\-*/()]+$")
NUMBER = re.compile(r"\d+(?:\.\d+)?|\.\d+")


def oracle(expression: str) -> Fraction:
    """Exact value by Python's own parser over Fractions. Test-only and restricted to digits and operators;
    the product never evaluates Python."""
    assert PLAIN_ARITHMETIC.match(expression)
    code = NUMBER.sub(lambda m: f"Fraction('{m.group(0)}')", expression)
    return eval(code, {"__builtins__": {}, "Fraction": Fraction})  # noqa: S307


@pytest.fixture(scope="module")
def annotations(shared_gsm8k_dir):
    found = []
    for line in (shared_gsm8k_dir / "train.jsonl").open():
        found.extend(ANNOTATION.findall(json.loads(line)["answer"]))
    return found


def test_calculator_agrees_with_exact_arithmetic_on_gsm8k(annotations):
    outcomes, misses = Counter(), []
    for expression, annotated in annotations:
        if not PLAIN_ARITHMETIC.match(expression) or not expression.strip():
            outcomes["not plain arithmetic (oracle skips)"] += 1
            continue
        try:
            expected = format_number(oracle(expression))
        except ZeroDivisionError:
            expected = "division by zero"
        except SyntaxError:
            outcomes["annotation is not a valid expression"] += 1
            continue
        try:
            got = calculate(expression)
        except CalcError as err:
            got = str(err)
        if got == expected:
            outcomes["agree"] += 1
        else:
            outcomes["disagree"] += 1
            misses.append((expression, got, expected))
        if (got == expected) and _same_value(got, annotated):
            outcomes["equals the annotated result"] += 1
    checked = outcomes["agree"] + outcomes["disagree"]
    rate = outcomes["agree"] / checked
    print(f"\n{len(annotations)} annotations; {dict(outcomes)}; agreement {rate:.4%}; misses: {misses[:10]}")
    assert checked > 20_000
    assert rate >= 0.9999, misses[:20]
    # The annotated results were themselves machine-computed: they must match too.
    assert outcomes["equals the annotated result"] / checked >= 0.999


def _same_value(got: str, annotated: str) -> bool:
    try:
        return Fraction(got) == Fraction(annotated.replace(",", "").strip())
    except (ValueError, ZeroDivisionError):
        return False
