"""Rollout settings that verl accepts but that crash at the first weight sync or waste the GPUs."""

from __future__ import annotations

import math

from omegaconf import DictConfig

from recipes.config_view import ConfigView
from recipes.preflight.findings import Report

SERVER_BACKENDS = ("sglang", "vllm")


def check_lora_with_sglang(view: ConfigView, report: Report) -> None:
    """verl reads two LoRA blocks (FSDP: model.lora_rank; Megatron: model.lora.rank): either one turns LoRA on."""
    if view.rollout_name == "sglang" and view.lora > 0 and not view.lora_merge:
        report.error("LoRA with SGLang 0.5.12 needs actor_rollout_ref.model.lora.merge=True: unmerged adapters are "
                     "sent with a field sglang 0.5.12 does not have (TypeError at the first weight sync); "
                     "PROFILE=lora sets it")


def concurrency_shortfall(view: ConfigView) -> bool:
    """SGLang's per-engine request cap lets only part of a step's trajectories run at once (an evaluation has no
    training step; SGLang queues what its engines cannot take at once)."""
    return (view.rollout_name in SERVER_BACKENDS and bool(view.max_num_seqs) and not view.val_only
            and max(1, view.engines) * view.max_num_seqs < view.trajectories)


def check_rollout_concurrency(view: ConfigView, report: Report) -> None:
    """Warn when SGLang's per-engine request cap lets only part of a step's trajectories run at once."""
    engines = max(1, view.engines)
    if concurrency_shortfall(view):
        capacity = engines * view.max_num_seqs
        report.warn(f"only {capacity} of the {view.trajectories} trajectories of a step can run at once ({engines} "
                    f"engines x max_num_seqs={view.max_num_seqs}); set actor_rollout_ref.rollout.max_num_seqs="
                    f"{math.ceil(view.trajectories / engines)} if the KV cache has room "
                    "(docs/configuration.md#choices-worth-knowing)")


def check_tool_timeout(config: DictConfig, report: Report) -> None:
    """The recipe's bound on one tool call (recipes/gsm8k/tool_timeout.py) is read in every agent-loop worker: a
    value it refuses would end the run at its first rollout."""
    from recipes.gsm8k.tool_timeout import tool_timeout_s

    try:
        tool_timeout_s(config)
    except ValueError as err:
        report.error(str(err))
