"""The rollout report as markdown: a per-step table for each dump folder, the tool-collapse alarm, the plots."""

from __future__ import annotations

from pathlib import Path

from recipes.rollout_report.stats import collapse_alarm

_HEADER = ["| step | rollouts | reward | accuracy | tool-call rate | tool calls/rollout | response chars |",
           "|---|---|---|---|---|---|---|"]


def render_report(series: dict[str, list[dict]], floor: float, drop: float, plots: list[Path]) -> str:
    """series: {label: per-step aggregates (recipes.rollout_report.stats.by_step)}; plots: PNGs beside the report."""
    lines = ["# Rollout report", ""]
    for label, steps in series.items():
        lines += [f"## {label}: steps {steps[0]['step']}-{steps[-1]['step']}", "", *_HEADER]
        lines += [f"| {s['step']} | {s['rollouts']} | {s['reward']:.3f} | {s['accuracy']:.3f} | "
                  f"{s['tool_call_rate']:.2f} | {s['tool_calls_per_rollout']:.2f} | {s['response_chars']:.0f} |"
                  for s in steps]
        alarm = collapse_alarm(steps, floor, drop)
        lines += ["", f"**ALARM**: {alarm}" if alarm else "Tool use: no collapse alarm.", ""]
    for plot in plots:
        lines += [f"![{plot.stem}]({plot.name})", ""]
    return "\n".join(lines)
