"""The fuzz budget and what a policy may write, as hypothesis strategies (tests/test_fuzz_model_output.py).

In the suite each property runs a fixed number of examples from a fixed seed (`derandomize`), the same every run,
plus its `@example`s (each a finding of a longer run, kept). `FUZZ_MINUTES=<m>` turns that into a search: the
properties share m minutes evenly, each drawing fresh random examples until its share is spent
(docs/testing.md#fuzzing). Nothing is stored between runs (no example database): a finding is kept as an `@example`.
"""

from __future__ import annotations

import functools
import json
import os
import time

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

_PROPERTIES: list = []  # every property of this run, to share FUZZ_MINUTES evenly
_QUIET = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much]


def fuzz_minutes() -> float:
    value = os.environ.get("FUZZ_MINUTES", "").strip()
    try:
        return max(float(value), 0.0) if value else 0.0
    except ValueError:
        raise ValueError(f"FUZZ_MINUTES must be a number of minutes, not {value!r}") from None


def fuzz(examples: int):
    """For a @given property: `examples` examples from a fixed seed in the suite; with FUZZ_MINUTES, random ones in
    batches until its share of the budget is spent."""
    minutes = fuzz_minutes()
    batch = max(examples * 10, 200)

    def decorate(prop):
        _PROPERTIES.append(prop)
        configured = settings(max_examples=batch if minutes else examples, derandomize=not minutes, database=None,
                              deadline=None, suppress_health_check=_QUIET)(prop)

        @functools.wraps(prop)
        def run(*args, **kwargs):
            if not minutes:
                configured(*args, **kwargs)
                return
            until, batches = time.monotonic() + minutes * 60 / len(_PROPERTIES), 0
            while time.monotonic() < until:  # each batch from a fresh random seed
                configured(*args, **kwargs)
                batches += 1
            print(f"[fuzz] {prop.__name__}: {batches} batches of {batch} random examples")

        return run

    return decorate


# ---- what a policy may write --------------------------------------------------------------------------------------

# Text decoded from tokens is valid Unicode: no lone surrogates (category Cs); anything else may appear.
any_char = st.characters(exclude_categories=("Cs",))
# What the recipe's readers look for, and what broke them before: tags, markers, JSON's pieces, escapes that decode
# to surrogates, long numbers, special tokens.
FRAGMENTS = ("<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "####", "#### 72", "\n", " ",
             '{"name": ', '"calculator"', '"arguments": ', '{"expression": ', '"', "}", "{", "[", "]", ",", ":",
             "\\", "\\u", "\\ud800", "\\udfff", "\\ud83d", "\\ude00", "\\ud83d\\ude00", "\\n", "\\\"", "1e9999999",
             "9" * 60, "1,000", "$", "-", ".", "%", "**", "^", "<|im_end|>", "<|im_start|>", "<<48/2=24>>", "72")

# JSON values a model may write, strings with any code point (a JSON escape can carry a lone surrogate)
any_code_point = st.characters() | st.integers(0xD800, 0xDFFF).map(chr)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(any_code_point, max_size=12),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12)


def _as_written(value: object, ascii_only: bool) -> str:
    """JSON as a model would write it: escapes where a character cannot be written (a surrogate), else either."""
    text = json.dumps(value, ensure_ascii=ascii_only)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = json.dumps(value)
    return text


@functools.cache
def _tool_names() -> list[str]:
    """The recipe's tool names, from their schemas (a policy calls them most)."""
    from tools.calculator import CalculatorTool
    from tools.gsm8k_reward_tool import Gsm8kRewardTool
    return [tool.SCHEMA.function.name for tool in (CalculatorTool, Gsm8kRewardTool)]


@st.composite
def call_bodies(draw) -> str:
    """A <tool_call> body: a JSON call (any name, any arguments, the calculator's often), maybe cut short, or not
    JSON at all."""
    name = draw(st.sampled_from([*_tool_names(), "python"]) | st.text(any_code_point, max_size=8)
                | json_values)
    arguments = draw(st.fixed_dictionaries({"expression": expressions}) | json_values)
    text = _as_written({"name": name, "arguments": arguments}, draw(st.booleans()))
    if draw(st.integers(0, 4)) == 0:
        text = text[:draw(st.integers(0, len(text)))]
    return draw(st.just(text) | model_text)


model_text = st.lists(st.sampled_from(FRAGMENTS) | st.text(any_char, max_size=16), max_size=24).map("".join)


@st.composite
def turns(draw) -> str:
    """One assistant turn: text, tool calls (closed, or left open), an answer."""
    parts = draw(st.lists(model_text | call_bodies().map(lambda body: f"<tool_call>\n{body}\n</tool_call>")
                          | call_bodies().map(lambda body: f"<tool_call>{body}"), min_size=1, max_size=4))
    return "".join(parts)


# Arithmetic as a model writes it: numbers of any size and form, the operators the calculator reads and some it
# does not, brackets, words.
literals = st.one_of(
    st.integers(-10**6, 10**6).map(str),
    st.decimals(allow_nan=False, allow_infinity=False, places=3).map(str),
    st.builds(lambda m, e: f"{m}e{e}", st.sampled_from(["1", "9.9", "0.1", "000.000", "1_000", "5."]),
              st.integers(-10**12, 10**12)),
    st.text(st.sampled_from("0123456789._eE+-"), min_size=1, max_size=12))
OPERATORS = (" + ", " - ", " * ", " / ", " // ", " % ", "%", " ** ", "^", " x ", "×", "÷", ",", " of ", "")


@st.composite
def _expression(draw, depth: int = 0) -> str:
    if depth > 3 or draw(st.integers(0, 2)) == 0:
        return draw(literals | st.sampled_from(["inf", "nan", "0x10", "pi", "$12", "(", ")", "=", "\ud800", "\x00"]))
    left, right = draw(_expression(depth + 1)), draw(_expression(depth + 1))
    shape = draw(st.sampled_from(["{}{}{}", "({}{}{})", "-{}{}{}"]))
    return shape.format(left, draw(st.sampled_from(OPERATORS)), right)


expressions = _expression() | st.text(any_code_point, max_size=40)
