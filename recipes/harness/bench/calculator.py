"""Benchmark: calculator latency per call, through the tool's `execute` (what the agent loop pays) and the
pure evaluator, over GSM8K's own `<<expr=result>>` expressions.

    python scripts/bench_calculator.py [--calls 5000]

Target: p99 <= 1 ms per call. Last line: `RESULT calculator_p99_ms=<p99 of execute>`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import statistics
import sys
import time

from recipes.constants import SHARED_GSM8K_DIR
from recipes.tool_sets import get_tool_set
from tools.arithmetic import CalcError, calculate

TARGET_MS = 1.0
FALLBACK = ["48/2", "(16-3-4)*2", "1.5*4", "2**10", "1,000+250", "20%*50", "9**9**9", "1/0", "12*60/100"]


def gsm8k_expressions(limit: int) -> list[str]:
    path = SHARED_GSM8K_DIR / "train.jsonl"
    if not path.is_file():
        return (FALLBACK * (limit // len(FALLBACK) + 1))[:limit]
    found = []
    for line in path.open():
        found.extend(re.findall(r"<<([^=<>]*)=", json.loads(line)["answer"]))
    return (found * (limit // len(found) + 1))[:limit]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def time_execute(expressions: list[str]) -> list[float]:
    from verl.tools.tool_registry import initialize_tools_from_config

    (tool,) = initialize_tools_from_config(str(get_tool_set("calculator").config_path))
    times = []
    for expression in expressions:
        start = time.perf_counter()
        instance_id, _ = await tool.create(create_kwargs={"row_index": 0})
        await tool.execute(instance_id, {"expression": expression})
        await tool.release(instance_id)
        times.append((time.perf_counter() - start) * 1e3)
    return times


def time_evaluator(expressions: list[str]) -> list[float]:
    times = []
    for expression in expressions:
        start = time.perf_counter()
        try:
            calculate(expression)
        except CalcError:
            pass
        times.append((time.perf_counter() - start) * 1e3)
    return times


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--calls", type=int, default=5000)
    args = p.parse_args()
    expressions = gsm8k_expressions(args.calls)
    time_evaluator(expressions[:200])  # warm up
    pure = time_evaluator(expressions)
    tool = asyncio.run(time_execute(expressions))
    for name, times in (("evaluator", pure), ("tool execute", tool)):
        print(f"{name:>12}: {len(times)} calls, median {statistics.median(times):.4f} ms, "
              f"p99 {percentile(times, 0.99):.4f} ms, max {max(times):.4f} ms")
    p99 = percentile(tool, 0.99)
    print(f"p99 {'within' if p99 <= TARGET_MS else 'OVER'} the {TARGET_MS} ms target")
    print(f"RESULT calculator_p99_ms={p99:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
