"""Benchmark: full GSM8K data prep from local files, as a user runs it (a fresh process each time).

    python scripts/bench_data_prep.py --input_dir DIR [--runs 5]    # DIR: GSM8K's train/test.jsonl (or GSM8K_DIR)
    python scripts/bench_data_prep.py --quick        # 1 run on the bundled sample: that it runs, not a figure

Target: median <= 15 s on 2 CPU cores. Last line: `RESULT data_prep_seconds=<median>`.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from data_prep.sources import SAMPLE_DIR
from recipes.constants import REPO_ROOT

TARGET_SECONDS = 15.0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--input_dir", default=os.environ.get("GSM8K_DIR", ""),
                   help="GSM8K's {train,test}.jsonl (default: $GSM8K_DIR)")
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--tool_set", default="both", help="the widest rows (both tools' kwargs)")
    p.add_argument("--quick", action="store_true", help="--runs 1 on data_prep/gsm8k_sample")
    args = p.parse_args(argv)
    if args.quick:
        args.runs, args.input_dir = 1, str(SAMPLE_DIR)
    if not args.input_dir or not (Path(args.input_dir) / "train.jsonl").is_file():
        print(f"no GSM8K train.jsonl in {args.input_dir or '(no folder given)'}: pass --input_dir DIR or set "
              "GSM8K_DIR", file=sys.stderr)
        return 2

    times = []
    with tempfile.TemporaryDirectory() as out:
        for i in range(args.runs):
            cmd = [sys.executable, str(REPO_ROOT / "data_prep" / "gsm8k.py"), "--input_dir", args.input_dir,
                   "--local_save_dir", out, "--tool_set", args.tool_set]
            start = time.perf_counter()
            proc = subprocess.run(cmd, capture_output=True, text=True)
            elapsed = time.perf_counter() - start
            if proc.returncode != 0:
                print(proc.stderr, file=sys.stderr)
                return 1
            times.append(elapsed)
            print(f"run {i + 1}/{args.runs}: {elapsed:.2f} s")
    median = statistics.median(times)
    verdict = "within" if median <= TARGET_SECONDS else "OVER"
    print(f"median {median:.2f} s over {args.runs} runs ({verdict} the {TARGET_SECONDS:.0f} s target)")
    print(f"RESULT data_prep_seconds={median:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
