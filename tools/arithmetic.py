"""Exact, bounded arithmetic for the calculator tool. No eval: the expression is parsed to an AST and only
numbers and arithmetic operators are walked; every value is a Fraction, so 0.1+0.2 is 0.3.

Bounds keep a hostile or confused model from stalling a rollout worker: expression length, AST size,
exponent size, and result magnitude are all capped before any big number is built.
"""

from __future__ import annotations

import ast
import operator
import re
from fractions import Fraction

MAX_EXPRESSION_CHARS = 200
MAX_NODES = 100
MAX_EXPONENT = 100  # |b| in a**b
MAX_ABS_VALUE = Fraction(10) ** 30  # bigger results are refused, not computed
MAX_DECIMALS = 10


class CalcError(ValueError):
    """A message for the model: what was wrong with its expression."""


_BINARY = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
    ast.FloorDiv: lambda a, b: Fraction(a // b),  # GSM8K's own annotations use it ("560//10")
}
_UNARY = {ast.UAdd: operator.pos, ast.USub: operator.neg}
# "1,000" -> "1000" only between digit groups of three, so "f(1,2)" stays a (rejected) call.
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
_PERCENT = re.compile(r"%")
_WORD_OPERATORS = {"×": "*", "÷": "/", "−": "-", "^": "**"}


def _normalise(expression: str) -> str:
    text = expression.strip().rstrip("=").strip()
    for symbol, op in _WORD_OPERATORS.items():
        text = text.replace(symbol, op)
    text = re.sub(r"(?<=[\d)\s])[xX](?=[\s\d(])", "*", text)  # "3 x 4" as a product
    text = text.replace("$", "")
    text = _THOUSANDS.sub("", text)
    # "15%" -> "(15/100)": percent is a postfix on a number or a parenthesised group
    return _PERCENT.sub("/100", text)


def evaluate(expression: str) -> Fraction:
    if not isinstance(expression, str):
        raise CalcError("the expression must be a string, e.g. \"48/2\"")
    if not expression.strip():
        raise CalcError("empty expression")
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise CalcError(f"expression too long ({len(expression)} characters, at most {MAX_EXPRESSION_CHARS})")
    text = _normalise(expression)
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError:
        raise CalcError(f"cannot parse {expression!r}: use numbers, + - * / ** % and parentheses") from None
    if sum(1 for _ in ast.walk(tree)) > MAX_NODES:
        raise CalcError(f"expression too complex (more than {MAX_NODES} parts)")
    return _eval(tree.body)


def _eval(node: ast.AST) -> Fraction:
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return _bounded(Fraction(str(node.value)))  # via str: 0.1 is 1/10, not the binary float
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _eval(node.left), _eval(node.right)
        if isinstance(node.op, (ast.Div, ast.FloorDiv)) and right == 0:
            raise CalcError("division by zero")
        return _bounded(_BINARY[type(node.op)](left, right))
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow):
        return _power(_eval(node.left), _eval(node.right))
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_eval(node.operand))
    raise CalcError(f"unsupported: {_describe(node)}; only numbers, + - * / // ** % and parentheses are allowed")


def _power(base: Fraction, exponent: Fraction) -> Fraction:
    if exponent.denominator != 1:
        raise CalcError("only whole-number exponents are supported")
    if abs(exponent) > MAX_EXPONENT:
        raise CalcError(f"exponent too large (at most {MAX_EXPONENT})")
    if base == 0 and exponent < 0:
        raise CalcError("division by zero")
    # Refuse before computing: |base|**e would exceed the cap (checked on magnitudes, cheaply).
    if abs(base) > 1 and exponent > 0 and _digits(abs(base)) * int(exponent) > 40:
        raise CalcError("result too large")
    return _bounded(base ** int(exponent))


def _digits(value: Fraction) -> int:
    return len(str(value.numerator // value.denominator))


def _bounded(value: Fraction) -> Fraction:
    if abs(value) > MAX_ABS_VALUE:
        raise CalcError("result too large")
    if value.denominator > 10**40:  # tiny fractions from repeated division: keep numbers printable
        value = value.limit_denominator(10**20)
    return value


def _describe(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return f"the name {node.id!r}"
    if isinstance(node, ast.Call):
        return "function calls"
    if isinstance(node, ast.Constant):
        return f"the value {node.value!r}"
    return type(node).__name__


def format_number(value: Fraction) -> str:
    """24 not 24.0; 0.3333333333 for 1/3 (10 decimals, trailing zeros dropped); -0 as 0."""
    if value.denominator == 1:
        return str(value.numerator)
    scaled = round(value * 10**MAX_DECIMALS)  # round half to even, exact on Fractions
    sign = "-" if scaled < 0 else ""
    whole, frac = divmod(abs(scaled), 10**MAX_DECIMALS)
    digits = f"{frac:0{MAX_DECIMALS}d}".rstrip("0")
    if not digits:
        return f"{sign}{whole}" if whole else "0"
    return f"{sign}{whole}.{digits}"


def calculate(expression: str) -> str:
    """The formatted result, or raises CalcError with a message for the model."""
    return format_number(evaluate(expression))
