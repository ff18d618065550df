"""GPU counts the step's batch and the rollout engines divide. verl asserts these deep inside (validate_config's
"real_train_batch_size ... must be divisible by minimal possible batch size", the workers' "rollout world_size ...
is not divisible by infer_world_size" and the update's mini-batch split over the data-parallel ranks); the
preflight says them first, in one line with the counts that would work."""

from __future__ import annotations

from recipes.config_view import ConfigView


def _divides(gpus: int, trajectories: int, update: int, tp: int) -> bool:
    return trajectories % gpus == 0 and update % gpus == 0 and gpus % tp == 0


def division_problems(view: ConfigView) -> list[str]:
    """One line per way the GPU count does not divide the step (empty: it does, or verl's dynamic batching sizes
    the micro-batches itself)."""
    nodes, per_node, gpus = view.nnodes, view.gpus_per_node, view.gpus
    tp, n, prompts, mini = view.tensor_parallel, view.rollout_n, view.train_batch_size, view.mini_batch
    trajectories, update = prompts * n, mini * n
    if _divides(gpus, trajectories, update, tp):
        return []
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
    counts = [str(g) for g in range(1, max(16, 2 * per_node) + 1) if _divides(nodes * g, trajectories, update, tp)]
    advice = (f"N_GPUS_PER_NODE={', '.join(counts[:-1])} or {counts[-1]}" if len(counts) > 1 else
              f"N_GPUS_PER_NODE={counts[0]}" if counts else "another GPU count")
    if trajectories % gpus and mini == prompts and gpus % tp == 0:
        fitting = max((b for b in range(1, prompts + 1) if (b * n) % gpus == 0), default=None)
        if fitting:
            advice += (f", or a batch {where} divide (data.train_batch_size={fitting} "
                       f"actor_rollout_ref.actor.ppo_mini_batch_size={fitting})")
    return [f"{'; '.join(whys)}: verl would stop with an AssertionError; use {advice}"]
