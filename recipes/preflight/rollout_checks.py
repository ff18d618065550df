"""Rollout settings that verl accepts but that crash at the first weight sync or waste the GPUs."""

from __future__ import annotations

import math

from omegaconf import DictConfig, OmegaConf

from recipes.preflight.findings import Report

SERVER_BACKENDS = ("sglang", "vllm")


def lora_rank(config: DictConfig) -> int:
    """verl reads two LoRA blocks (FSDP: model.lora_rank; Megatron: model.lora.rank): either one turns LoRA on."""
    model = config.actor_rollout_ref.model
    return max(int(model.get("lora_rank") or 0), int(OmegaConf.select(model, "lora.rank") or 0))


def check_lora_with_sglang(config: DictConfig, report: Report) -> None:
    rollout = config.actor_rollout_ref.rollout
    if rollout.name == "sglang" and lora_rank(config) > 0 and not config.actor_rollout_ref.model.lora.merge:
        report.error("LoRA with SGLang 0.5.12 needs actor_rollout_ref.model.lora.merge=True: unmerged adapters are "
                     "sent with a field sglang 0.5.12 does not have (TypeError at the first weight sync); "
                     "PROFILE=lora sets it")


def check_rollout_concurrency(config: DictConfig, report: Report) -> None:
    """Warn when SGLang's per-engine request cap lets only part of a step's trajectories run at once."""
    rollout, trainer = config.actor_rollout_ref.rollout, config.trainer
    if rollout.name not in SERVER_BACKENDS or not rollout.get("max_num_seqs") or trainer.get("val_only"):
        return  # an evaluation has no training step; SGLang queues what its engines cannot take at once
    engines = max(1, int(trainer.n_gpus_per_node) * int(trainer.nnodes) // int(rollout.tensor_model_parallel_size))
    trajectories = int(config.data.train_batch_size) * int(rollout.n)
    capacity = engines * int(rollout.max_num_seqs)
    if capacity < trajectories:
        report.warn(f"only {capacity} of the {trajectories} trajectories of a step can run at once ({engines} "
                    f"engines x max_num_seqs={rollout.max_num_seqs}); set actor_rollout_ref.rollout.max_num_seqs="
                    f"{math.ceil(trajectories / engines)} if the KV cache has room "
                    "(docs/configuration.md#choices-worth-knowing)")


def check_tool_timeout(config: DictConfig, report: Report) -> None:
    """The recipe's bound on one tool call (recipes/gsm8k/tool_timeout.py) is read in every agent-loop worker: a
    value it refuses would end the run at its first rollout."""
    from recipes.gsm8k.tool_timeout import tool_timeout_s

    try:
        tool_timeout_s(config)
    except ValueError as err:
        report.error(str(err))
