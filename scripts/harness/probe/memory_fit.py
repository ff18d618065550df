"""The recipe's memory plan (recipes/preflight/memory.py) applied to the probe: the largest micro-batch, up to the
profile's, at which one GPU runs the reference and old log-prob passes of the share (forward passes: they fit where
the update, which holds gradients and Adam too, does not); the actor's planned peak for the probe's own run, to set
against what verl measures; and the actor's planned peak on a GPU of the profile's node, the figure the probe
projects (a one-GPU run's measured peak is neither: verl reads torch's peak once, after the update, over all the
worker's passes, with the whole state on one GPU and offloaded between phases).

The actor's part of a phase is the plan's figure for the GPU less what is not the actor's: the CUDA context and
SGLang while it sleeps (its context and graphs; its share too unless free_cache_engine releases it).
"""

from __future__ import annotations

from dataclasses import dataclass

from omegaconf import DictConfig, OmegaConf

from recipes.config_view import ConfigView
from recipes.models import ModelSize
from recipes.preflight import memory

ACTOR_PHASES = ("training", "old log-probs", "reference log-probs")
UPDATE_KEY = "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu"
LOG_PROB_KEYS = ("actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu",
                 "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu")


@dataclass(frozen=True)
class ActorPeak:
    gib: float
    phase: str  # the plan's phase where the actor peaks
    plan: memory.MemoryPlan


def with_micro_batches(config: DictConfig, update: int, log_prob: int) -> DictConfig:
    changed = OmegaConf.create(OmegaConf.to_container(config))
    OmegaConf.update(changed, UPDATE_KEY, update)
    for key in LOG_PROB_KEYS:
        OmegaConf.update(changed, key, log_prob)
    return changed


def actor_peak(config: DictConfig, size: ModelSize, gpu_gib: float) -> ActorPeak:
    """The actor's planned peak over its phases (torch's memory: what verl's max_memory_allocated counts)."""
    plan = memory.plan_memory(ConfigView.of(config), size, "the probe's model", gpu_gib, "the probe")
    asleep = memory.SGLANG_OVERHEAD_GIB + (0.0 if plan.sglang_alternates else plan.sglang_weights + plan.sglang_kv)
    actor = {phase: plan.phases[phase] - memory.CONTEXT_GIB - asleep for phase in ACTOR_PHASES if phase in plan.phases}
    phase = max(actor, key=actor.get)
    return ActorPeak(actor[phase], phase, plan)


def log_prob_micro_batch(config: DictConfig, size: ModelSize, gpu_gib: float, update: int, wanted: int) -> int:
    """The largest micro-batch from `wanted` down (halving, not below the update's) whose log-prob passes the plan
    fits on this GPU with its margin for error (memory.FIX_MARGIN), the update at `update`."""
    candidate = wanted
    while candidate > update:
        plan = memory.plan_memory(ConfigView.of(with_micro_batches(config, update, candidate)), size, "", gpu_gib, "")
        forward = [plan.phases[p] for p in ("old log-probs", "reference log-probs") if p in plan.phases]
        if max(forward) <= memory.FIX_MARGIN * gpu_gib:
            return candidate
        candidate //= 2
    return max(candidate, update)


@dataclass(frozen=True)
class Planned:
    """The plan's figures the report sets beside the measured ones."""

    gpu_gib: float  # this GPU's memory (the node's GPUs assumed the same)
    gpu_source: str
    profile_micro_batch: int  # a node GPU's, the profile's
    this_run: ActorPeak  # the probe's own one-GPU run, offloaded, at its micro-batches
    node: ActorPeak  # a GPU of the profile's node: its share of the state, the profile's micro-batches


def gpu_memory(measured: float | None, node_config: DictConfig) -> tuple[float, str]:
    """This GPU's memory: nvidia-smi's, else (no GPU here) the card the profile is for."""
    if measured:
        return measured, "nvidia-smi"
    card = ConfigView.of(node_config).card_gb
    if not card:
        raise ValueError("no GPU here and the profile names no card (recipe.gpu_memory_gb): nothing to plan for")
    return float(card), f"no GPU here: the card the profile is for, {card:g} GB (recipe.gpu_memory_gb)"
