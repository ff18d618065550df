"""GPU counts the step's batch and the rollout engines divide. verl asserts these deep inside (validate_config's
"real_train_batch_size ... must be divisible by minimal possible batch size", the workers' "rollout world_size ...
is not divisible by infer_world_size" and the update's mini-batch split over the data-parallel ranks); the
preflight says them first, in one line with the counts that would work."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from recipes.config_view import ConfigView

# What a view breaks of the preflight's rules, by name (RunFacts.breaks): a fix is offered only if it breaks none.
Breaks = Callable[[ConfigView], list[str]]
DIVISION, SPLIT, CONCURRENCY, MEMORY, NO_STEP = "division", "split", "concurrency", "memory", "no step"


def divides(view: ConfigView) -> bool:
    """The step's trajectories and an update's split evenly over the GPUs, which make whole SGLang engines."""
    gpus = view.gpus
    return (view.trajectories % gpus == 0 and (view.mini_batch * view.rollout_n) % gpus == 0
            and gpus % view.tensor_parallel == 0)


def fitting_batch(view: ConfigView, breaks: Breaks, most: int | None = None) -> ConfigView | None:
    """The largest batch of at most `most` prompts (default: the step's), one update a step as now, that breaks no
    rule of the preflight (`breaks`: every trajectory of it in flight at once included); None if none does."""
    for batch in range((most or view.train_batch_size), 0, -1):
        fixed = replace(view, train_batch_size=batch, mini_batch=batch)
        if not _broken(fixed, breaks):
            return fixed
    return None


def _broken(view: ConfigView, breaks: Breaks) -> list[str]:
    return sorted({*breaks(view), *([DIVISION] if not divides(view) else [])})


def division_problems(view: ConfigView, breaks: Breaks = lambda view: []) -> list[str]:
    """One line per way the GPU count does not divide the step (empty: it does), with the GPU counts and the batch
    that would, each tried against every rule of the preflight (`breaks`: the rules a changed view breaks)."""
    if divides(view):
        return []
    nodes, per_node, gpus = view.nnodes, view.gpus_per_node, view.gpus
    tp, n, prompts, mini = view.tensor_parallel, view.rollout_n, view.train_batch_size, view.mini_batch
    trajectories, update = prompts * n, mini * n
    where = f"{nodes} nodes x {per_node} GPUs" if nodes > 1 else f"{per_node} GPU{'s' if per_node > 1 else ''}"
    whys = []
    if trajectories % gpus:
        whys.append(f"the step's {prompts} prompts x {n} samples = {trajectories} trajectories do not split evenly "
                    f"over {where}")
    elif update % gpus:
        whys.append(f"an update's {mini} prompts x {n} samples = {update} trajectories do not split evenly over "
                    f"{where}")
    if gpus % tp:
        verb = "does" if gpus == 1 else "do"
        whys.append(f"{where} {verb} not make whole SGLang engines of tensor_model_parallel_size={tp}")
    counts = [str(g) for g in range(1, max(16, 2 * per_node) + 1)
              if not _broken(replace(view, gpus_per_node=g), breaks)]
    advice = (f"N_GPUS_PER_NODE={', '.join(counts[:-1])} or {counts[-1]}" if len(counts) > 1 else
              f"N_GPUS_PER_NODE={counts[0]}" if counts else "another GPU count")
    if trajectories % gpus and mini == prompts and gpus % tp == 0:
        fitting = fitting_batch(view, breaks)
        if fitting:
            advice += f", or a batch {where} divide ({' '.join(view.overrides_to(fitting))})"
    return [f"{'; '.join(whys)}: verl would stop with an AssertionError; use {advice}"]
