"""Benchmark: calculator latency per call, through the tool's `execute` (what the agent loop pays: the evaluation
runs in a work process, tools/process_pool.py, so this includes the pipe's round trip) and the pure evaluator in
this process, over GSM8K's own `<<expr=result>>` expressions.

    python scripts/bench_calculator.py [--calls 5000] [--input_dir DIR]
    python scripts/bench_calculator.py --quick      # 200 calls: that it runs (`-m bench`), no figure

The expressions come from DIR's train.jsonl (GSM8K's own file), by default from the GSM8K sample that ships with
the data prep (data_prep/gsm8k_sample), repeated to --calls; the source is printed.

Target: p99 <= 1 ms per call. Last line: `RESULT calculator_p99_ms=<p99 of execute> calculator_median_ms=<its median>`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import statistics
import sys
import time
from pathlib import Path

from data_prep.sources import SAMPLE_DIR
from recipes.gsm8k.tool_sets import get_tool_set
from tools.arithmetic import CalcError, calculate

TARGET_MS = 1.0


def gsm8k_expressions(input_dir: Path, limit: int) -> list[str]:
    """The `<<expr=result>>` expressions of input_dir/train.jsonl, repeated to `limit`."""
    found = []
    for line in (input_dir / "train.jsonl").open():
        found.extend(re.findall(r"<<([^=<>]*)=", json.loads(line)["answer"]))
    if not found:
        raise SystemExit(f"no <<expr=result>> expression in {input_dir / 'train.jsonl'}: not GSM8K's own file")
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


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--calls", type=int, default=5000)
    p.add_argument("--input_dir", type=Path, default=SAMPLE_DIR, help="GSM8K's train.jsonl is read from here")
    p.add_argument("--quick", action="store_true", help="--calls 200")
    args = p.parse_args(argv)
    if args.quick:
        args.calls = 200
    expressions = gsm8k_expressions(args.input_dir, args.calls)
    print(f"{len(expressions)} calls over the expressions of {args.input_dir / 'train.jsonl'}")
    time_evaluator(expressions[:200])  # warm up
    pure = time_evaluator(expressions)
    tool = asyncio.run(time_execute(expressions))
    for name, times in (("evaluator", pure), ("tool execute", tool)):
        print(f"{name:>12}: {len(times)} calls, median {statistics.median(times):.4f} ms, "
              f"p99 {percentile(times, 0.99):.4f} ms, max {max(times):.4f} ms")
    p99 = percentile(tool, 0.99)
    print(f"p99 {'within' if p99 <= TARGET_MS else 'OVER'} the {TARGET_MS} ms target")
    print(f"RESULT calculator_p99_ms={p99:.4f} calculator_median_ms={statistics.median(tool):.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
