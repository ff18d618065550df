"""Summarize a verl validation dump as the run scored it (strict and flexible), tool use and pass@k.

    gsm8k-eval-summary --validation_dir outputs/<exp>/validation [--step N] [--k 1 --k 8]

Writes summary.json and summary.md beside the dumps: the latest step's. `--step N` of an earlier step writes
summary_step<N>.json and .md instead (summary.json stays the latest step's). Last line:
`RESULT strict_acc=<v> flexible_acc=<v> tool_calls_per_answer=<v>`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from recipes.results.dumps import load_dump_dir
from recipes.results.scoring import summarize


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--validation_dir", required=True, help="trainer.validation_data_dir of the eval run")
    p.add_argument("--step", type=int, default=None, help="which dump (default: the latest)")
    p.add_argument("--k", type=int, action="append", help="pass@k to report (repeatable; default 1)")
    args = p.parse_args(argv)
    try:
        records = load_dump_dir(args.validation_dir)
    except (FileNotFoundError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    latest = max(r["step"] for r in records)
    step = args.step if args.step is not None else latest
    chosen = [r for r in records if r["step"] == step]
    if not chosen:
        print(f"error: no dump for step {step} in {args.validation_dir}", file=sys.stderr)
        return 1
    try:
        summary = {"step": step, **summarize(chosen, tuple(args.k or [1]))}
    except ValueError as err:  # a dump without the reward's keys, or pass@k beyond the samples per prompt
        print(f"error: {err}", file=sys.stderr)
        return 1
    # summary.json is the latest step's (eval_gsm8k.sh and readers of a run expect that): an earlier step's
    # summary goes beside it under its own name, never over it
    name = "summary" if step == latest else f"summary_step{step}"
    out = Path(args.validation_dir)
    lines = ["| metric | value |", "|---|---|"] + [
        f"| {k} | {v:.4f} |" if isinstance(v, float) else f"| {k} | {v} |" for k, v in summary.items()]
    _write_atomic(out / f"{name}.json", json.dumps(summary, indent=2))
    _write_atomic(out / f"{name}.md", "\n".join(lines) + "\n")
    print("\n".join(lines))
    if step != latest:
        print(f"step {step} is not the latest ({latest}): written to {out / name}.json and .md; summary.json stays "
              f"step {latest}'s")
    print(f"RESULT strict_acc={summary['strict_acc']:.4f} flexible_acc={summary['flexible_acc']:.4f} "
          f"tool_calls_per_answer={summary['tool_calls_per_answer']:.4f}")
    return 0


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


if __name__ == "__main__":
    sys.exit(main())
