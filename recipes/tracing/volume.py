"""What a run's traces weigh, and which GRPO groups a step traces: the one home of that arithmetic.

The launcher's plan and its TRACE_GB_PER_DAY budget (recipes/preflight/trace_budget.py), the agent-loop workers'
rotation (recipes/gsm8k/worker.py), the trace tally and the rollout benchmark read it from here.

    traced a step   = G groups x n rollouts (+ G x val_n a validation, every test_freq steps)
    MB a step       = traced x TRACE_BYTES_PER_TRAJECTORY / 1e6
    GB a day        = MB a step x 86,400 / the step's seconds / 1e3

The step's seconds are the short end of the profile's step time (recipe.step_time: the most traces a day), the
figure the plan's time row uses too.

G is verl's per-worker sampling (max_samples_per_step_per_worker prompts on each of the agent-loop workers, all
their rollouts) unless the launcher set the recipe's own count (GROUPS_KEY): then each step G groups are spread
over the workers, the remainder in turn (`groups_on_worker`), so a budget below one group per worker still traces
whole groups, at least one a step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from recipes.config_view import GROUPS_KEY as GROUPS_KEY  # the recipe's key, said where the trace budget lives
from recipes.config_view import ConfigView

# Bytes W&B receives per traced trajectory of the recipe (its root, chat call, and per turn a generate, a parse and
# a tool call, in a GRPO thread with the group's figures): docs/measured.md#trace_bytes_per_trajectory,
# measured by scripts/bench_rollout.py at the production mix of turns (tests/test_trace_volume.py holds them equal).
TRACE_BYTES_PER_TRAJECTORY = 23_682
FREE_PLAN_GB_PER_MONTH = 1.0  # W&B's free plan: Weave data ingested a month
DAYS_PER_MONTH = 365.25 / 12
# verl's own: the prompts each agent-loop worker traces a step (all their rollouts)
PER_WORKER_KEY = "actor_rollout_ref.rollout.trace.max_samples_per_step_per_worker"


class TraceBudgetError(ValueError):
    """A budget or tracing setting the launcher refuses; the message is the one line the user sees."""


@dataclass(frozen=True)
class TraceShape:
    """What sets a run's trace volume, read from its composed config's view."""

    prompts: int  # data.train_batch_size: GRPO groups a step
    n: int  # rollout.n
    workers: int  # rollout.agent.num_workers
    val_n: int  # rollout.val_kwargs.n
    test_freq: int  # trainer.test_freq (<= 0: no validation during training)
    per_worker: int | None  # verl's max_samples_per_step_per_worker (None: every prompt)
    groups: int | None  # GROUPS_KEY (None: verl's per-worker sampling decides)
    steps: int | None  # trainer.total_training_steps, if set
    step_s: float | None = None  # the short end of the profile's step time (recipe.step_time); None: not estimated

    @classmethod
    def of(cls, config: ConfigView | Any, steps: int | None = None) -> TraceShape:
        """From the config's view (or a composed config, a DictConfig or hydra's saved copy); `steps`: the run's, where
        trainer.total_training_steps does not set them."""
        view = config if isinstance(config, ConfigView) else ConfigView.of(config)
        return cls(prompts=view.train_batch_size, n=view.rollout_n, workers=view.agent_workers, val_n=view.val_n,
                   test_freq=view.test_freq, per_worker=view.trace_per_worker, groups=view.trace_groups,
                   steps=view.total_training_steps or steps, step_s=view.step_seconds[0] if view.step_seconds else None)

    @property
    def prompts_per_worker(self) -> int:
        return self.prompts // self.workers

    def groups_per_step(self) -> int:
        """GRPO groups traced in a training step."""
        if self.groups is not None:
            return min(self.groups, self.prompts)
        k = self.prompts_per_worker if self.per_worker is None else min(self.per_worker, self.prompts_per_worker)
        return self.workers * k


def groups_on_worker(slot: int, workers: int, groups: int, step: int) -> int:
    """Prompts agent-loop worker `slot` (its chunk's place in verl's split) traces at `step` when `groups` are
    traced a step: each worker groups // workers, and the remainder on as many workers, one further each step."""
    base, extra = divmod(groups, workers)
    return base + ((slot - step * extra) % workers < extra)


def split_refusal(shape: TraceShape) -> str | None:
    """Why a traced run must not start with these sizes, or None. verl splits a step into num_workers equal
    contiguous chunks of the n-times repeated batch: unless the workers divide the prompts, a GRPO group lands
    in two workers, and each traces (and annotates) only its part."""
    if shape.prompts % shape.workers == 0:
        return None
    fits = max(d for d in range(1, shape.workers + 1) if shape.prompts % d == 0)
    return (f"data.train_batch_size={shape.prompts} is not a multiple of actor_rollout_ref.rollout.agent.num_workers="
            f"{shape.workers}: verl would split GRPO groups across agent-loop workers and trace parts of groups; "
            f"use actor_rollout_ref.rollout.agent.num_workers={fits}")


@dataclass(frozen=True)
class Volume:
    groups: int  # traced a training step
    trajectories: float  # traced a step, validation averaged over the steps
    mb_per_step: float
    gb_per_day: float | None  # None: the profile has no step time
    gb_per_run: float | None


def volume(shape: TraceShape, groups: int, bytes_per_trajectory: int = TRACE_BYTES_PER_TRAJECTORY) -> Volume:
    validation = groups * shape.val_n / shape.test_freq if shape.test_freq > 0 else 0.0
    trajectories = groups * shape.n + validation
    mb = trajectories * bytes_per_trajectory / 1e6
    return Volume(groups, trajectories, mb, mb * 86_400 / shape.step_s / 1e3 if shape.step_s else None,
                  mb * shape.steps / 1e3 if shape.steps else None)


def free_plan_gb_per_day() -> float:
    return FREE_PLAN_GB_PER_MONTH / DAYS_PER_MONTH


def check_budget(gb_per_day: float) -> float:
    """`gb_per_day` if it is a budget; TraceBudgetError otherwise (0 would trace nothing, and says so nowhere)."""
    if not math.isfinite(gb_per_day) or gb_per_day <= 0:
        raise TraceBudgetError(f"TRACE_GB_PER_DAY={gb_per_day:g} must be a positive number of GB a day; TRACE=off "
                               "traces nothing")
    return gb_per_day


def budget_groups(shape: TraceShape, gb_per_day: float) -> tuple[int, str | None]:
    """GRPO groups a step that fit `gb_per_day`, at least one and at most every prompt; and the one line to say
    when the budget was clamped. TraceBudgetError for a budget that is not a positive number."""
    check_budget(gb_per_day)
    one = volume(shape, 1).gb_per_day
    if one is None:
        raise TraceBudgetError(f"TRACE_GB_PER_DAY={gb_per_day:g} needs the profile's step time (recipe.step_time), "
                               "and this profile has none: set max_samples_per_step_per_worker instead")
    groups = math.floor(gb_per_day / one)
    if groups < 1:
        return 1, (f"TRACE_GB_PER_DAY={gb_per_day:g} is below one GRPO group a step (~{one:.2f} GB a day at "
                   f"{shape.step_s:g} s a step): tracing 1 group a step (clamped); TRACE=off traces nothing")
    if groups >= shape.prompts:
        return shape.prompts, (f"TRACE_GB_PER_DAY={gb_per_day:g} holds every GRPO group of a step: tracing all "
                               f"{shape.prompts} groups a step (~{volume(shape, shape.prompts).gb_per_day:.1f} GB a "
                               "day)")
    return groups, None


def describe(shape: TraceShape) -> str:
    """The plan's tracing row (before its W&B project): what is traced a step, what it weighs, against the free
    plan."""
    groups = shape.groups_per_step()
    v = volume(shape, groups)
    if shape.groups is None:
        k = groups // shape.workers
        how = f"{k} prompt(s) on each of the {shape.workers} agent-loop workers"
    else:
        base, extra = divmod(groups, shape.workers)
        how = (f"{base} prompt(s) on each of the {shape.workers} agent-loop workers" if not extra else
               f"{base} prompt(s) on each of the {shape.workers} agent-loop workers, 1 more on {extra} of them in turn"
               if base else f"1 prompt on {extra} of the {shape.workers} agent-loop workers, in turn")
    free = free_plan_gb_per_day()
    run = f", ~{_size(v.gb_per_run)} per run ({shape.steps} steps)" if v.gb_per_run is not None else ""
    traced = (f"weave, {groups} GRPO group(s) a step ({how}, all {shape.n} rollouts, one Weave thread each) = "
              f"{groups * shape.n} traced trajectories; ~{v.mb_per_step:.2f} MB a step")
    if v.gb_per_day is None:
        return f"{traced}{run} (~{TRACE_BYTES_PER_TRAJECTORY / 1e3:.1f} KB a trajectory; no step time: no figure a day)"
    return (f"{traced}, ~{_size(v.gb_per_day)} a day at {shape.step_s:g} s a step{run} "
            f"(~{TRACE_BYTES_PER_TRAJECTORY / 1e3:.1f} KB a trajectory); W&B's free plan holds "
            f"{FREE_PLAN_GB_PER_MONTH:g} GB a month (~{1e3 * free:.0f} MB a day): {v.gb_per_day / free:.0f}x that")


def _size(gb: float) -> str:
    return f"{gb:.2f} GB" if gb >= 0.1 else f"{1e3 * gb:.1f} MB"
