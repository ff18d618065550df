"""Offline report from verl's rollout dumps: PNG plots and a short markdown summary.

    gsm8k-rollout-report --rollout_dir outputs/<exp>/rollouts \
        [--validation_dir outputs/<exp>/validation] --out outputs/<exp>/report

Writes steps.png (reward, accuracy, tool-call rate with the collapse alarm, response length by step),
prompts.png (accuracy per prompt across steps), by_ops.png (accuracy and tool calls per rollout by step for each
number of operations the reference solutions need, when the dumps hold the reward's `ref_ops` and more than one
such number) and report.md.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from recipes.results.dumps import load_dump_dir
from recipes.results.markdown import render_report
from recipes.results.plots import plot_ops, plot_prompts, plot_steps
from recipes.results.scoring import by_step, by_step_and_ops
from recipes.results.stats import chosen_prompts, prompt_accuracy


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rollout_dir", help="trainer.rollout_data_dir")
    p.add_argument("--validation_dir", help="trainer.validation_data_dir")
    p.add_argument("--out", required=True)
    p.add_argument("--prompts", type=int, default=12, help="how many prompts in prompts.png")
    p.add_argument("--prompt_contains", action="append", help="pick prompts containing this text (repeatable)")
    p.add_argument("--collapse_floor", type=float, default=0.2, help="alarm when the tool-call rate ends below this")
    p.add_argument("--collapse_drop", type=float, default=0.5, help="...or below this fraction of its best step")
    args = p.parse_args(argv)
    if not args.rollout_dir and not args.validation_dir:
        p.error("pass --rollout_dir and/or --validation_dir")

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    series, ops_series, records_for_prompts = {}, {}, []
    try:
        for label, folder in (("train rollouts", args.rollout_dir), ("validation", args.validation_dir)):
            if folder:
                records = load_dump_dir(folder)
                series[label] = by_step(records)
                if len(by_ops := by_step_and_ops(records)) > 1:
                    ops_series[label] = by_ops
                if label == "validation" or not records_for_prompts:  # prompts.png: validation prompts recur
                    records_for_prompts = records
    except (FileNotFoundError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1

    steps_png = plot_steps(series, out, args.collapse_floor)
    per_prompt = prompt_accuracy(records_for_prompts)
    prompts = chosen_prompts(per_prompt, args.prompts, args.prompt_contains)
    prompts_png = plot_prompts(per_prompt, prompts, out) if prompts else None
    ops_png = plot_ops(ops_series, out) if ops_series else None

    plots = [p for p in (steps_png, ops_png, prompts_png) if p]
    report = render_report(series, args.collapse_floor, args.collapse_drop, plots, ops_series)
    (out / "report.md").write_text(report)
    print(report)
    print(f"wrote {out / 'report.md'}, " + ", ".join(str(p) for p in plots))
    return 0


if __name__ == "__main__":
    sys.exit(main())
