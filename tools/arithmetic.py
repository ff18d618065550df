"""Exact, bounded arithmetic for the calculator tool. No eval: the expression is parsed to an AST and only
numbers and arithmetic operators are walked; every value is a Fraction, so 0.1+0.2 is 0.3.

What the operators mean (tools/calculator.py's schema says the same to the model):
- `%` after a number or a bracket, before an operator, a closing bracket or the end, is percent of that number:
  `15%` is 0.15, `15% * 80` and `80 * 15%` are 12, `200 / 50%` is 400; between two numbers it is the remainder,
  with the divisor's sign as in Python: `17 % 5` is 2, `-7 % 3` is 2. Anything else after `%` is refused with how to
  write it.
- `1,000` is 1000 (commas between groups of three digits); `3 x 4` is a product; `^` is a power.
- Numbers are decimal: `0x10`, `0b101`, `0o17` are refused (not 0 times 10), and a literal is read exactly as
  written (`1e309` is that number, refused as too large, never infinity).
- A power is bounded by the size of its exact result, estimated before it is computed: `2**41` and `1.05**50` are
  computed, `10**10**10` refused at once.

Bounds keep a hostile or confused model from stalling a rollout worker: every size is checked before the number it
sizes is built. The expression's length and its AST's size; a literal's place value from its digits and exponent as
written (`1e9999999` is refused, and `1e-9999999` read as 0, from the characters alone: Fraction would build
10**9999999 first); the bits an operation's exact result can need, from its operands' sizes; the digits a power would
need; and every result's magnitude. So the work of one evaluation does not grow with the numbers it is given.
"""

from __future__ import annotations

import ast
import math
import operator
import re
import warnings
from fractions import Fraction

MAX_EXPRESSION_CHARS = 200
MAX_NODES = 100
MAX_POWER_DIGITS = 10_000  # digits of a power's exact numerator and denominator together, estimated beforehand
MAX_MAGNITUDE = 30  # results past 10**30 are refused, not computed
MAX_ABS_VALUE = Fraction(10) ** MAX_MAGNITUDE
MAX_DENOMINATOR = 10**40  # a finer fraction is rounded to one whose denominator is at most MAX_ROUNDED_DENOMINATOR
MAX_ROUNDED_DENOMINATOR = 10**20
# The bits an operation's exact result may need (its operands' numerators and denominators together bound them);
# the same size as the largest power.
MAX_RESULT_BITS = math.ceil(MAX_POWER_DIGITS * math.log2(10))
MAX_EXPONENT_DIGITS = 6  # a literal's exponent with more digits decides by its sign alone: too large, or 0
MAX_DECIMALS = 10


class CalcError(ValueError):
    """A message for the model: what was wrong with its expression."""


def _remainder(a: Fraction, b: Fraction) -> Fraction:
    return a % b


_BINARY = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
    ast.FloorDiv: lambda a, b: Fraction(a // b),  # GSM8K's own annotations use it ("560//10")
    ast.Mod: _remainder,
}
_DIVISIONS = (ast.Div, ast.FloorDiv, ast.Mod)
_UNARY = {ast.UAdd: operator.pos, ast.USub: operator.neg}
# "1,000" -> "1000" only between digit groups of three, so "f(1,2)" stays a (rejected) call.
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
_WORD_OPERATORS = {"×": "*", "÷": "/", "−": "-", "^": "**"}
_NOT_DECIMAL = re.compile(r"(?<![\w.])0[xXbBoO][0-9a-fA-F_]*")  # Python's hex, binary, octal literals
# A decimal literal as Python's tokenizer reads it (underscores removed): digits, a fraction, an exponent.
_DECIMAL_LITERAL = re.compile(r"(\d*)(?:\.(\d*))?(?:[eE]([+-]?)(\d+))?")
_PERCENT_WRITTEN = "write 15% * 80 for 15 percent of 80, or 17 % 5 for the remainder of 17 divided by 5"


def _normalise(expression: str) -> str:
    text = expression.strip().rstrip("=").strip()
    for symbol, op in _WORD_OPERATORS.items():
        text = text.replace(symbol, op)
    other_base = _NOT_DECIMAL.search(text)
    if other_base:
        raise CalcError(f"{other_base.group()!r} is not a decimal number: write numbers in decimal (and 3 * 4, "
                        "or 3 x 4, for a product)")
    text = re.sub(r"(?<=[\d)\s])[xX](?=[\s\d(])", "*", text)  # "3 x 4" as a product
    text = text.replace("$", "")
    text = _THOUSANDS.sub("", text)
    return _percents(text)


def _percents(text: str) -> str:
    """Each `%` that is a percent (followed by an operator, a closing bracket or the end) as `(operand/100)`, the
    operand being the number or bracketed group before it; a `%` followed by a number or an opening bracket is left
    as Python's remainder; any other is refused."""
    pos = 0
    while (at := text.find("%", pos)) != -1:
        after = text[at + 1:].lstrip()
        if after[:1].isdigit() or after[:1] in (".", "("):
            pos = at + 1  # the remainder operator
            continue
        if after and after[0] not in "+-*/)":
            raise CalcError(f"'%' before {after[0]!r}: {_PERCENT_WRITTEN}")
        start = _operand_start(text, at)
        if start is None:
            raise CalcError(f"'%' after nothing to take a percent of: {_PERCENT_WRITTEN}")
        replaced = f"({text[start:at].strip()}/100)"
        text = text[:start] + replaced + text[at + 1:]
        pos = start + len(replaced)
    return text


def _operand_start(text: str, end: int) -> int | None:
    """Where the number or bracketed group that ends at `end` (spaces before it skipped) starts."""
    i = end
    while i > 0 and text[i - 1].isspace():
        i -= 1
    if i > 0 and text[i - 1] == ")":
        depth = 0
        for j in range(i - 1, -1, -1):
            depth += {")": 1, "(": -1}.get(text[j], 0)
            if depth == 0:
                return j
        return None
    j = i
    while j > 0 and (text[j - 1].isalnum() or text[j - 1] in "._"):
        j -= 1
    return j if j < i else None


def check_size(expression: object) -> None:
    """What can be refused without reading the expression: not a string, empty, too long."""
    if not isinstance(expression, str):
        raise CalcError("the expression must be a string, e.g. \"48/2\"")
    if not expression.strip():
        raise CalcError("empty expression")
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise CalcError(f"expression too long ({len(expression)} characters, at most {MAX_EXPRESSION_CHARS})")


def evaluate(expression: str) -> Fraction:
    check_size(expression)
    if not _is_text(expression):
        raise CalcError("the expression holds a character that is not text (a lone UTF-16 surrogate): write plain "
                        "arithmetic, e.g. \"48/2\"")
    text = _normalise(expression)
    try:
        with warnings.catch_warnings():  # "1if 2": Python's warning about the model's text is not ours to log
            warnings.simplefilter("ignore", SyntaxWarning)
            tree = ast.parse(text, mode="eval")
    except (SyntaxError, ValueError):  # ValueError: what some Pythons raise for a null byte
        raise CalcError(f"cannot parse {expression!r}: use numbers, + - * / ** % and parentheses") from None
    if sum(1 for _ in ast.walk(tree)) > MAX_NODES:
        raise CalcError(f"expression too complex (more than {MAX_NODES} parts)")
    return _eval(tree.body, text)


def _eval(node: ast.AST, source: str) -> Fraction:
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return _bounded(_literal(node, source))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _eval(node.left, source), _eval(node.right, source)
        if isinstance(node.op, _DIVISIONS) and right == 0:
            raise CalcError("division by zero")
        _check_result_bits(left, right)
        return _bounded(_BINARY[type(node.op)](left, right))
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow):
        return _power(_eval(node.left, source), _eval(node.right, source))
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_eval(node.operand, source))
    raise CalcError(f"unsupported: {_describe(node)}; only numbers, + - * / // ** % and parentheses are allowed")


def _is_text(expression: str) -> bool:
    try:
        expression.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _literal(node: ast.Constant, source: str) -> Fraction:
    """A number exactly as written: 0.1 is 1/10, not the binary float, and 1e309 is 10**309, not infinity. Its size
    is read from its characters before any number is built from them: one past 10**MAX_MAGNITUDE is refused, and one
    below 1/MAX_DENOMINATOR is 0 (what _bounded makes of it; results are shown to 10 decimals anyway)."""
    if isinstance(node.value, int):  # Python built it from at most MAX_EXPRESSION_CHARS digits
        return Fraction(node.value)
    written = (ast.get_source_segment(source, node) or "").replace("_", "")
    parts = _DECIMAL_LITERAL.fullmatch(written)
    if not parts or not (parts.group(1) or parts.group(2)):
        raise CalcError(f"cannot read the number {written!r}: write it in decimal, e.g. 1.5 or 2e3")
    whole, fraction, sign, exponent = parts.group(1), parts.group(2) or "", parts.group(3) or "", parts.group(4) or "0"
    digits = whole + fraction
    significant = digits.lstrip("0")
    if not significant:
        return Fraction(0)
    exponent = exponent.lstrip("0") or "0"
    if len(exponent) > MAX_EXPONENT_DIGITS:  # no digit count can bring it back: decided by its sign
        if sign == "-":
            return Fraction(0)
        raise CalcError(f"result too large: {_shown(written)} is past 10^{MAX_MAGNITUDE}, the largest number the "
                        "calculator works with")
    # the power of ten of the leading digit: the value is in [10**lead, 10**(lead + 1))
    lead = int(sign + exponent) + len(whole) - 1 - (len(digits) - len(significant))
    if lead >= MAX_MAGNITUDE + 1:
        raise CalcError(f"result too large: {_shown(written)} is past 10^{MAX_MAGNITUDE}, the largest number the "
                        "calculator works with")
    if lead < -math.log10(MAX_DENOMINATOR):
        return Fraction(0)
    return Fraction(written)  # its exponent is within a few hundred now


def _shown(written: str) -> str:
    return written if len(written) <= 40 else f"{written[:20]}...{written[-12:]}"


def _check_result_bits(left: Fraction, right: Fraction) -> None:
    """Refuse an operation whose exact result could need more than MAX_RESULT_BITS, before it is computed: the
    numerator and denominator of a sum, difference, product, quotient or remainder need at most the bits of the
    operands' four parts together (plus a carry)."""
    bits = sum(n.bit_length() for n in (left.numerator, left.denominator, right.numerator, right.denominator))
    if bits > MAX_RESULT_BITS:
        raise CalcError(f"numbers too long: the exact result could need about {bits * math.log10(2):.0f} digits (at "
                        f"most {MAX_POWER_DIGITS})")


def _power(base: Fraction, exponent: Fraction) -> Fraction:
    if exponent.denominator != 1:
        raise CalcError("only whole-number exponents are supported")
    if base == 0:
        if exponent < 0:
            raise CalcError("division by zero")
        return Fraction(int(exponent == 0))
    # Refused before it is computed when its exact numerator and denominator would need too many digits (1.05**50:
    # 131; 2**41: 13); a result past MAX_ABS_VALUE is then refused as any other.
    digits = abs(exponent) * (math.log10(abs(base.numerator)) + math.log10(base.denominator))
    if digits > MAX_POWER_DIGITS:
        magnitude = float(exponent) * (math.log10(abs(base.numerator)) - math.log10(base.denominator))
        raise CalcError(f"exponent too large: the result is about 10^{magnitude:.3g} and would need about "
                        f"{float(digits):.3g} digits exactly (at most {MAX_POWER_DIGITS})")
    return _bounded(base ** int(exponent))


def _bounded(value: Fraction) -> Fraction:
    if abs(value) > MAX_ABS_VALUE:
        raise CalcError(f"result too large: past 10^{MAX_MAGNITUDE}, the largest number the calculator works with")
    if value.denominator > MAX_DENOMINATOR:  # tiny fractions from repeated division: keep numbers printable
        value = value.limit_denominator(MAX_ROUNDED_DENOMINATOR)
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
