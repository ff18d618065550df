"""Per-prompt accuracy across steps (the report's prompts.png), and the tool-collapse alarm on the per-step
series (recipes/results/scoring.py by_step)."""

from __future__ import annotations

from collections import defaultdict
from statistics import mean

from recipes.gsm8k.reward_keys import ACC


def prompt_accuracy(records: list[dict]) -> dict[str, dict[int, float]]:
    """{prompt text: {step: accuracy over that prompt's rollouts at that step}}."""
    table: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for r in records:
        table[str(r.get("input", ""))][r["step"]].append(r[ACC])
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
