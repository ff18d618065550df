"""The rollout report as markdown: a per-step table for each dump folder, the tool-collapse alarm, the plots."""

from __future__ import annotations

from pathlib import Path

from recipes.results.stats import collapse_alarm

_HEADER = ["| step | rollouts | reward | accuracy | tool-call rate | tool calls/rollout | response chars |",
           "|---|---|---|---|---|---|---|"]


def render_report(series: dict[str, list[dict]], floor: float, drop: float, plots: list[Path],
                  ops_series: dict[str, dict[int, list[dict]]] | None = None) -> str:
    """series: {label: per-step aggregates (recipes.results.scoring.by_step)}; plots: PNGs beside the report;
    ops_series: {label: the same by number of reference operations (scoring.by_step_and_ops)}, where dumps have it."""
    lines = ["# Rollout report", ""]
    for label, steps in series.items():
        lines += [f"## {label}: steps {steps[0]['step']}-{steps[-1]['step']}", "", *_HEADER]
        lines += [f"| {s['step']} | {s['rollouts']} | {s['reward']:.3f} | {s['accuracy']:.3f} | "
                  f"{s['tool_call_rate']:.2f} | {s['tool_calls_per_rollout']:.2f} | {s['response_chars']:.0f} |"
                  for s in steps]
        alarm = collapse_alarm(steps, floor, drop)
        lines += ["", f"**ALARM**: {alarm}" if alarm else "Tool use: no collapse alarm.", ""]
        by_ops = (ops_series or {}).get(label)
        if by_ops and len(by_ops) > 1:  # one row per step: accuracy and tool calls per rollout for each ops count
            ops = list(by_ops)
            lines += [f"By operations needed ({label}): accuracy / tool calls per rollout", "",
                      "| step | " + " | ".join(f"{k} ops" for k in ops) + " |", "|---|" + "---|" * len(ops)]
            cells = {k: {s["step"]: s for s in by_ops[k]} for k in ops}
            for step in sorted({s["step"] for k in ops for s in by_ops[k]}):
                row = [f"{cells[k][step]['accuracy']:.2f} / {cells[k][step]['tool_calls_per_rollout']:.2f}"
                       if step in cells[k] else "" for k in ops]
                lines.append(f"| {step} | " + " | ".join(row) + " |")
            lines.append("")
    for plot in plots:
        lines += [f"![{plot.stem}]({plot.name})", ""]
    return "\n".join(lines)
