"""The CPU learning check's bar (issue 19), judged from the three evaluation summaries scripts/learn_cpu.sh writes.

    python -m recipes.cpu_learning.bar --sft S.json --final F.json --tools_off O.json   # one line per criterion

Strict accuracies in 0..1: the final model at least 20 points above the SFT start, its tool-call rate at least
0.8, tools on at least 20 points above tools off; and the SFT start inside the 10-50% gate that leaves GRPO room.
Prints `[bar] pass|FAIL ...` lines; exit 0 either way (the run's RESULT line is its outcome, this says how to read
it).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

MIN_GAIN = 0.20  # final over the SFT start
MIN_TOOL_CALL_RATE = 0.80
MIN_TOOL_GAIN = 0.20  # tools on over tools off, same checkpoint
SFT_GATE = (0.10, 0.50)  # where the SFT start must be for the gain to be possible and not free


def judge(sft: float, final: float, tools_off: float, tool_call_rate: float) -> list[tuple[bool, str]]:
    low, high = SFT_GATE
    return [
        (low <= sft <= high, f"SFT start {sft:.3f} within the {low:.0%}-{high:.0%} gate"),
        (final - sft >= MIN_GAIN - 1e-9, f"after GRPO {final:.3f}: {100 * (final - sft):+.1f} points over the SFT "
                                         f"start (needs {100 * MIN_GAIN:+.0f})"),
        (tool_call_rate >= MIN_TOOL_CALL_RATE, f"tool-call rate {tool_call_rate:.3f} (needs {MIN_TOOL_CALL_RATE})"),
        (final - tools_off >= MIN_TOOL_GAIN - 1e-9, f"tools on {final:.3f} vs tools off {tools_off:.3f}: "
                                                    f"{100 * (final - tools_off):+.1f} points (needs "
                                                    f"{100 * MIN_TOOL_GAIN:+.0f})"),
    ]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    for name in ("sft", "final", "tools_off"):
        p.add_argument(f"--{name}", type=Path, required=True, help="a summary.json of scripts/eval_summary.py")
    args = p.parse_args(argv)
    sft, final, off = (json.loads(path.read_text()) for path in (args.sft, args.final, args.tools_off))
    verdicts = judge(sft["strict_acc"], final["strict_acc"], off["strict_acc"], final["tool_call_rate"])
    for ok, text in verdicts:
        print(f"[bar] {'pass' if ok else 'FAIL'}  {text}")
    print(f"[bar] {'met' if all(ok for ok, _ in verdicts) else 'NOT met'} (issue 19's bar)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
