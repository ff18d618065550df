"""tools/arithmetic.py, in this process: exact results, clean numbers, bounded work, no Python. The calculator tool
around it, which evaluates in a work process: tests/test_calculator.py."""

import re
import time

import pytest

from tools.arithmetic import CalcError, calculate

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    "expression, expected",
    [
        ("48/2", "24"), ("(16-3-4)*2", "18"), ("1.5*4", "6"), ("2**10", "1024"), ("1,000+250", "1250"),
        ("-3+1", "-2"), ("-(-5)", "5"), ("0.1+0.2", "0.3"), ("1/3", "0.3333333333"), ("2/3", "0.6666666667"),
        ("15%", "0.15"), ("20%*50", "10"), ("50%+1", "1.5"), ("(10+5)%*200", "30"), ("3 x 4", "12"),
        ("10÷4", "2.5"), ("6×7", "42"), ("5^2", "25"), ("2**-2", "0.25"), ("$12*3", "36"), ("48/2=", "24"),
        ("1e3", "1000"), ("-0.5*0", "0"), ("7/2*2", "7"),
    ],
)
def test_results_are_exact_and_cleanly_formatted(expression, expected):
    assert calculate(expression) == expected


@pytest.mark.parametrize(
    "expression, message",
    [
        ("1/0", "division by zero"), ("0**-1", "division by zero"), ("5/(2-2)", "division by zero"),
        ("9**9**9", "exponent too large"), ("2**0.5", "whole-number exponents"), ("(2**100)", "result too large"),
        ("10**20*10**20", "result too large"), ("x" * 10_000, "expression too long"),
        ("__import__('os').system('x')", "function calls"), ("open('/etc/passwd')", "function calls"),
        ("a+1", "the name 'a'"), ("'ab'*3", "the value 'ab'"), ("[1,2]", "List"), ("1 if 2 else 3", "IfExp"),
        ("2 < 3", "Compare"), ("(1).__class__", "Attribute"), ("lambda: 1", "Lambda"), ("1;2", "cannot parse"),
        ("", "empty expression"), ("+".join(["1"] * 99), "too complex"), ("12,34+1", "Tuple"),
    ],
)
def test_bad_input_is_a_message_not_an_exception_leak(expression, message):
    with pytest.raises(CalcError, match=message):
        calculate(expression)


def test_hostile_inputs_return_fast():
    for expression in ("9**9**9", "9**99", "9" * 199, "2**100*2**100", "x" * 10_000):
        start = time.perf_counter()
        with pytest.raises(CalcError):
            calculate(expression)
        assert time.perf_counter() - start < 0.05, expression


def test_deep_nesting_is_fine():
    assert calculate("(" * 90 + "2" + ")" * 90 + "*3") == "6"


def test_non_string_expression_is_refused():
    with pytest.raises(CalcError, match="must be a string"):
        calculate(42)


# ---- what `%`, powers, other bases and huge literals mean (the tool's schema says the same) --------------------


@pytest.mark.parametrize("expression, expected", [
    ("17%5", "2"), ("17 % 5", "2"), ("(17)%(5)", "2"), ("10%3%2", "1"), ("7.5%2", "1.5"), ("-7%3", "2"),
    ("15% * 80", "12"), ("80 * 15%", "12"), ("80*15%", "12"), ("200/50%", "400"), ("(10+5)%", "0.15"),
    ("-15%", "-0.15"), ("1,000%", "10"), ("50% x 2", "1"), ("100 - 20%", "99.8"),
    ("2**41", "2199023255552"), ("1.05**50", "11.4673997858"), ("1000*1.05**10", "1628.8946267774"),
    ("2**-100", "0"), ("1**1000000000", "1"), ("(-1)**1000000001", "-1"), ("0**100000000000", "0"),
    ("1e-400", "0"), ("10 x 10", "100"), ("0 x 10", "0"),
])
def test_what_each_operator_computes(expression, expected):
    assert calculate(expression) == expected


@pytest.mark.parametrize("expression, message", [
    ("5%0", "division by zero"), ("15% of 80", "write 15% * 80"), ("15%%", "write 15% * 80"),
    ("0x10", "'0x10' is not a decimal number"), ("0b101", "'0b101' is not a decimal number"),
    ("0o17+1", "'0o17' is not a decimal number"),
    ("10**10**10", "exponent too large"), ("1.0000001**100000", "exponent too large"),
    ("0.5**100000", "exponent too large"), ("2**101", "result too large"), ("1.5**200", "result too large"),
    ("1e309", "result too large"), ("1e309*0", "result too large"), ("-1e309", "result too large"),
    ("inf", "the name 'inf'"), ("nan", "the name 'nan'"), ("float('inf')", "function calls"),
])
def test_what_it_refuses_it_says_in_one_line(expression, message):
    with pytest.raises(CalcError, match=re.escape(message)) as err:
        calculate(expression)
    assert "\n" not in str(err.value)


def test_huge_powers_are_refused_before_any_big_number_is_built():
    for expression in ("10**10**10", "1.0000001**100000", "0.5**100000", "9**9**9", "(-2)**99999999"):
        start = time.perf_counter()
        with pytest.raises(CalcError, match="exponent too large"):
            calculate(expression)
        assert time.perf_counter() - start < 0.05, expression


# ---- sizes are read before any number is built: a literal's digits and exponent, each operation's result ------


@pytest.mark.parametrize("expression, answer", [
    ("1e9999999", "Error: result too large: 1e9999999 is past 10^30"),
    ("9.9e99999999", "Error: result too large: 9.9e99999999 is past 10^30"),
    ("0.1e99999999-1", "Error: result too large: 0.1e99999999 is past 10^30"),
    ("1e999999999", "Error: result too large: 1e999999999 is past 10^30"),
    ("1e-9999999", "0"), ("1e-9999999+2", "2"), ("0.1e31", "1000000000000000000000000000000"),
    ("1e-40*1e30", "0.0000000001"), ("1e-41*1e30", "0"), ("000.000e999999999", "0"), ("1_000.5e-3", "1.0005"),
])
def test_a_literal_is_sized_from_its_characters(expression, answer):
    """Fraction("1e9999999") builds 10**9999999 before any bound is checked (7.6 s; the others here ran for
    hours): the literal's place value is read from its digits and exponent first."""
    try:
        got = calculate(expression)
    except CalcError as err:
        got = f"Error: {err}"
    assert got.startswith(answer) and "\n" not in got, got


def _peak_bytes(expression: str) -> int:
    """The most memory that evaluating `expression` held at once: building a number of d digits takes ~0.4*d
    bytes, so this is the size of the largest number the evaluation built."""
    import tracemalloc

    calculate("1+1")  # caches (regexes, AST classes) warm: what is measured is the expression's own work
    tracemalloc.start()
    try:
        try:
            calculate(expression)
        except CalcError:
            pass
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("template", ["1e{0}", "1e-{0}", "9.9e{0}", "0.1e{0}-1", "5*1e{0}", "1e{0}/1e{0}", "2**1e{0}"])
def test_the_work_of_a_literal_does_not_grow_with_its_exponent(template):
    """The same literal at exponents 10**4 and 10**5 (10x the digits if the number were built: 4 KB and 41 KB)
    and 10**8: the memory held is the same."""
    small, large = _peak_bytes(template.format("9" * 4)), _peak_bytes(template.format("9" * 5))
    assert large < 2 * small + 8192, (template, small, large)
    huge = _peak_bytes(template.format("9" * 8))
    assert huge < 2 * small + 8192, (template, small, huge)


def test_an_operation_too_big_for_its_result_is_refused_before_it_is_computed():
    """Every value the evaluator holds is at most 10^30 with a denominator of at most 10^40, so no expression
    reaches this bound; it holds whatever the operands, should a bound above change."""
    from fractions import Fraction

    from tools.arithmetic import MAX_RESULT_BITS, _check_result_bits

    _check_result_bits(Fraction(10**100, 3), Fraction(7, 10**40))
    big = Fraction(2 ** (MAX_RESULT_BITS // 2))
    with pytest.raises(CalcError, match="numbers too long: the exact result could need about"):
        _check_result_bits(big, big)


@pytest.mark.parametrize("expression", ["1+\ud800", "\udc00", "2*\ud83d\ude00", "1\x00+1"])
def test_text_that_is_not_text_is_a_message(expression):
    """A JSON escape gives the model lone surrogates (`"\\ud800"`); ast.parse raised UnicodeEncodeError, which the
    tool logged as a traceback."""
    with pytest.raises(CalcError, match="not text|cannot parse"):
        calculate(expression)
