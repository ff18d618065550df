"""Work a tool sends to its work processes (tools/process_pool.py), each standing for a way work goes wrong: what a
child process of the pool imports by name, so it imports nothing but the standard library and the calculator's
evaluator."""

from __future__ import annotations

import os

SPIN = "spin"  # the expression on which `spin_on` never returns


def spin_on(expression: str) -> str:
    """A CPU-bound evaluation that never ends on SPIN (a bomb no bound foresaw), the calculator's on anything else."""
    if expression == SPIN:
        while True:
            pass
    from tools.arithmetic import calculate

    return calculate(expression)


def divide_by_zero(expression: str) -> str:
    return str(1 / 0)


def exit_at_once(expression: str) -> str:
    os._exit(3)


def print_then_answer(expression: str) -> str:
    print("what a careless tool prints")
    return "42"


def allocate_past_the_limit(expression: str) -> str:
    return str(len(bytearray(2 << 30)))
