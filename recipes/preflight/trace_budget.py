"""TRACE_GB_PER_DAY, the launcher's trace budget: how many GRPO groups a step the run traces, so that the traces'
projected volume (recipes/tracing/volume.py) fits, at least one group a step. It needs the composed config (batch,
n, agent-loop workers, validation), so the preflight applies it as soon as the config composes, before any check
reads it, as two more overrides: verl's `max_samples_per_step_per_worker` (the most any worker traces a step) and
the recipe's GROUPS_KEY (the groups a step, which each worker turns into its share: recipes/gsm8k/worker.py)."""

from __future__ import annotations

import math

from omegaconf import OmegaConf

from recipes.config_view import GROUPS_KEY, ConfigView
from recipes.preflight.stale_keys import override_key
from recipes.tracing.volume import (
    PER_WORKER_KEY,
    TraceBudgetError,
    TraceShape,
    budget_groups,
    check_budget,
    split_refusal,
)

# The example the knob's error gives: above one group a step of every profile, whose validation adds to it
# (8xh100: ~0.55 GB a day a group; the README's TRACE_GB_PER_DAY=2 traces 3).
EXAMPLE_GB_PER_DAY = 2.0


def parse_budget(value: str) -> float:
    """The knob's number (GB a day); TraceBudgetError for anything else."""
    try:
        number = float(value)
    except ValueError:
        number = None
    if number is None:
        raise TraceBudgetError(f"TRACE_GB_PER_DAY must be a number of GB a day (e.g. {EXAMPLE_GB_PER_DAY:g}: "
                               f"the groups that fit it, at least one), not '{value}'; TRACE=off traces nothing")
    return check_budget(number)


def budget_overrides(view: ConfigView, gb_per_day: float, overrides: list[str]) -> tuple[list[str], str | None]:
    """The overrides that make the run trace what `gb_per_day` allows, and the line to print when it was clamped.
    TraceBudgetError (one line) when the budget cannot apply."""
    budget = f"{gb_per_day:g}"
    if not view.traces:
        raise TraceBudgetError(f"TRACE_GB_PER_DAY={budget} but this run traces nothing (trace.backend is not weave: "
                               "TRACE=off, or the profile's): set TRACE=on, or leave TRACE_GB_PER_DAY unset")
    both = [o for o in overrides if override_key(o) in (PER_WORKER_KEY, GROUPS_KEY)]
    if both:
        raise TraceBudgetError(f"TRACE_GB_PER_DAY={budget} and {both[0]} both set how much is traced: keep one")
    shape = TraceShape.of(view)
    refusal = split_refusal(shape)
    if refusal:
        raise TraceBudgetError(refusal)
    groups, note = budget_groups(shape, gb_per_day)
    return [f"{PER_WORKER_KEY}={math.ceil(groups / shape.workers)}", f"++{GROUPS_KEY}={groups}"], note


def apply_budget(config, overrides: list[str]) -> None:
    """The budget's overrides into an already composed config (what main_ppo will compose from them)."""
    for override in overrides:
        key, value = override.lstrip("+").split("=", 1)
        OmegaConf.update(config, key, int(value), force_add=True)
