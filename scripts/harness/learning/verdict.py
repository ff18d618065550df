"""The learning check's verdict, judged from the three evaluation summaries of its run.

    python -m harness.learning.verdict --sft S.json --final F.json --tools_off O.json [--task chain]

Strict accuracies in 0..1. Both tasks: the final model at least 20 points above the SFT start, its tool-call rate
at least 0.8, tools on at least 20 points above tools off. The chain task also: on problems of 3 steps, the final
model at least 20 points above the SFT start's accuracy there; and on the final model's correct answers to problems
of 2 or 3 steps, calls per required operation (`calls_per_op`) at least 0.9: it chains its calls, it does not guess.

Prints `[verdict] pass|FAIL ...` lines, one per criterion, then `VERDICT PASS|FAIL`; before them, `[verdict] note ...`
lines
that report without judging: where the SFT start lies against the 10-50% range the check is sized for (a start
outside it makes the gain easier or harder, not the learning less real; the same seed's start differed by 10
points between two machines, so a judged gate failed runs that learned); and what the tools-off criterion does not
show. The warm start's SFT renders every transcript with the calculator offered (transcripts.py), so a prompt without
tools is one the model never saw and its tools-off accuracy is ~0 by construction: the criterion is kept because it
fails when the tools-off validation did not run without the calculator (rows or agent loop mixed up), not as evidence
that the model cannot compute without its tool. Exit 0 either way (the run's RESULT line is its outcome, this says
how to read it).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

MIN_GAIN = 0.20  # final over the SFT start; the chain task: overall, and on its 3-step problems
MIN_TOOL_CALL_RATE = 0.80
MIN_TOOL_GAIN = 0.20  # tools on over tools off, same checkpoint
MIN_CALLS_PER_OP = 0.90  # chain task: on correct answers needing 2-3 operations
SFT_RANGE = (0.10, 0.50)  # where the SFT start was sized to be: reported, not judged
DEEPEST = 3  # the chain task's deepest problems (harness.learning.task.TASKS["chain"])


def judge(sft: float, final: float, tools_off: float, tool_call_rate: float) -> list[tuple[bool, str]]:
    return [
        (final - sft >= MIN_GAIN - 1e-9, f"after GRPO {final:.3f}: {100 * (final - sft):+.1f} points over the SFT "
                                         f"start {sft:.3f} (needs {100 * MIN_GAIN:+.0f})"),
        (tool_call_rate >= MIN_TOOL_CALL_RATE, f"tool-call rate {tool_call_rate:.3f} (needs {MIN_TOOL_CALL_RATE})"),
        (final - tools_off >= MIN_TOOL_GAIN - 1e-9, f"tools on {final:.3f} vs tools off {tools_off:.3f}: "
                                                    f"{100 * (final - tools_off):+.1f} points (needs "
                                                    f"{100 * MIN_TOOL_GAIN:+.0f}; tools off ~0 by construction: "
                                                    "see the note)"),
    ]


def judge_chain(sft: dict, final: dict, tools_off: dict) -> list[tuple[bool, str]]:
    """judge() on the overall figures, then the deepest problems' gain and calls per operation (summaries of
    gsm8k-eval-summary, which break accuracy down by `ref_ops`)."""
    key = f"strict_acc_ops{DEEPEST}"
    missing = [name for name, s in (("SFT", sft), ("final", final)) if key not in s or "calls_per_op" not in s]
    if missing:
        raise ValueError(f"the {' and '.join(missing)} summary has no {key} / calls_per_op: not a chain-task "
                         "evaluation (or a dump made before the reward gave ref_ops)")
    deep_sft, deep_final, chained = sft[key], final[key], final["calls_per_op"]
    return judge(sft["strict_acc"], final["strict_acc"], tools_off["strict_acc"], final["tool_call_rate"]) + [
        (deep_final - deep_sft >= MIN_GAIN - 1e-9, f"{DEEPEST}-step problems after GRPO {deep_final:.3f}: "
                                                   f"{100 * (deep_final - deep_sft):+.1f} points over the SFT start "
                                                   f"{deep_sft:.3f} (needs {100 * MIN_GAIN:+.0f})"),
        (chained >= MIN_CALLS_PER_OP, f"calls per operation {chained:.3f} on the "
                                      f"{final.get('correct_multi_op_answers', '?')} correct answers needing 2+ "
                                      f"operations (needs {MIN_CALLS_PER_OP})"),
    ]


def notes(sft: float, tools_off: float) -> list[str]:
    low, high = SFT_RANGE
    where = "inside" if low <= sft <= high else "outside"
    return [f"SFT start {sft:.3f}: {where} the {low:.0%}-{high:.0%} range the check is sized for (reported, not "
            "judged)",
            f"tools off {tools_off:.3f}: the warm start never saw a prompt without tools (its SFT always offers the "
            "calculator), so tools off is ~0 by construction; the tools on/off criterion checks that the tools-off "
            "validation ran without the calculator, not that the model cannot compute without it"]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    for name in ("sft", "final", "tools_off"):
        p.add_argument(f"--{name}", type=Path, required=True, help="a summary.json of gsm8k-eval-summary")
    p.add_argument("--task", default="one_step", choices=("one_step", "chain"))
    args = p.parse_args(argv)
    sft, final, off = (json.loads(path.read_text()) for path in (args.sft, args.final, args.tools_off))
    if args.task == "chain":
        try:
            verdicts = judge_chain(sft, final, off)
        except ValueError as err:
            p.error(str(err))
    else:
        verdicts = judge(sft["strict_acc"], final["strict_acc"], off["strict_acc"], final["tool_call_rate"])
    for text in notes(sft["strict_acc"], off["strict_acc"]):
        print(f"[verdict] note  {text}")
    for ok, text in verdicts:
        print(f"[verdict] {'pass' if ok else 'FAIL'}  {text}")
    print(f"VERDICT {'PASS' if all(ok for ok, _ in verdicts) else 'FAIL'} ({args.task} task)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
