"""Per-step aggregates and per-prompt accuracy, and the tool-collapse alarm."""

from __future__ import annotations

from collections import defaultdict
from statistics import mean


def by_step(records: list[dict]) -> list[dict]:
    groups: dict[int, list[dict]] = defaultdict(list)
    for r in records:
        groups[r["step"]].append(r)
    return [{
        "step": step,
        "rollouts": len(rs),
        "reward": mean(r["score"] for r in rs),
        "accuracy": mean(r["acc"] for r in rs),
        "tool_call_rate": mean(r["num_tool_calls"] > 0 for r in rs),
        "tool_calls_per_rollout": mean(r["num_tool_calls"] for r in rs),
        "response_chars": mean(r["response_chars"] for r in rs),
    } for step, rs in sorted(groups.items())]


def by_step_and_ops(records: list[dict]) -> dict[int, list[dict]]:
    """Per number of reference operations (the reward's `ref_ops`, GSM8K's `<<...>>` steps), the per-step accuracy
    and tool calls per rollout: {ops: [{"step", "rollouts", "accuracy", "tool_calls_per_rollout"}, ...]}. Empty
    when a dump line has no `ref_ops` (dumps made before the reward gave it)."""
    if not records or any("ref_ops" not in r for r in records):
        return {}
    groups: dict[int, list[dict]] = defaultdict(list)
    for r in records:
        groups[int(r["ref_ops"])].append(r)
    return {ops: [{k: v for k, v in s.items() if k in ("step", "rollouts", "accuracy", "tool_calls_per_rollout")}
                  for s in by_step(rs)] for ops, rs in sorted(groups.items())}


def prompt_accuracy(records: list[dict]) -> dict[str, dict[int, float]]:
    """{prompt text: {step: accuracy over that prompt's rollouts at that step}}."""
    table: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for r in records:
        table[str(r.get("input", ""))][r["step"]].append(r["acc"])
    return {prompt: {step: mean(v) for step, v in steps.items()} for prompt, steps in table.items()}


def chosen_prompts(per_prompt: dict[str, dict[int, float]], count: int, contains: list[str] | None) -> list[str]:
    if contains:
        return [p for p in per_prompt if any(c in p for c in contains)][:count]
    # the prompts seen at the most steps (validation prompts recur every eval), then by text for stability
    return sorted(per_prompt, key=lambda p: (-len(per_prompt[p]), p))[:count]


def collapse_alarm(steps: list[dict], floor: float, drop: float) -> str | None:
    """A warning when the tool-call rate ends below `floor`, or below `drop` x its best step."""
    if not steps:
        return None
    last, best = steps[-1]["tool_call_rate"], max(s["tool_call_rate"] for s in steps)
    if last < floor:
        return f"tool-call rate {last:.0%} at step {steps[-1]['step']} is below {floor:.0%}: tool use is collapsing"
    if best > 0 and last < drop * best:
        return (f"tool-call rate fell from {best:.0%} to {last:.0%} by step {steps[-1]['step']}: "
                "tool use is collapsing (try reward.custom_reward_function.reward_kwargs.tool_call_bonus=0.1)")
    return None
