"""The composed config as the recipe reasons about it: one read-only, typed view, read once.

    view = ConfigView.of(config)          # a composed DictConfig (or hydra's saved copy, a dict)
    view.train_batch_size, view.rollout_n, view.gpus, view.sequence ...
    replace(view, param_offload=True)     # the same run with a setting changed (a fix the memory plan tries)
    view.overrides_to(changed)            # ["actor_rollout_ref.actor.fsdp_config.param_offload=True"]

The schedule, the GPU division, the trace volume, the memory plan, the algorithm's and the plan's rows read the
values they share from here: each key of verl's config is named once, in the field that holds it, with its type.
The rest of the config (tool configs, paths the checks open, verl's validators) is read where it is used.
"""

from __future__ import annotations

import types
import typing
from dataclasses import dataclass, field, fields
from typing import Any

A = "actor_rollout_ref"
ACTOR, ROLLOUT = f"{A}.actor", f"{A}.rollout"
FSDP = f"{ACTOR}.fsdp_config"
# The recipe's own key (verl reads nothing under `recipe`): GRPO groups traced a step, set by TRACE_GB_PER_DAY.
# Not under rollout.trace, whose dataclass refuses fields verl does not know.
GROUPS_KEY = "recipe.trace_groups_per_step"


def key(path: str, default: Any = None):
    """A field read from `path` of the config; `default` where the config holds nothing (None) there."""
    return field(default=default, metadata={"key": path})


@dataclass(frozen=True)
class ConfigView:
    # data
    train_files: tuple[str, ...] = key("data.train_files", ())
    val_files: tuple[str, ...] = key("data.val_files", ())
    train_batch_size: int = key("data.train_batch_size", 1)  # prompts a step: GRPO groups
    gen_batch_size: int | None = key("data.gen_batch_size")  # prompts the dataloader serves a step, if not those
    train_max_samples: int = key("data.train_max_samples", -1)
    val_max_samples: int = key("data.val_max_samples", -1)
    max_prompt_length: int = key("data.max_prompt_length", 0)
    max_response_length: int = key("data.max_response_length", 0)
    # the model
    model_path: str = key(f"{A}.model.path", "")
    lora_rank: int = key(f"{A}.model.lora_rank", 0)  # FSDP's block
    lora_rank_megatron: int = key(f"{A}.model.lora.rank", 0)  # Megatron's: either one turns LoRA on
    lora_alpha: int = key(f"{A}.model.lora_alpha", 0)
    lora_merge: bool = key(f"{A}.model.lora.merge", False)
    gradient_checkpointing: bool = key(f"{A}.model.enable_gradient_checkpointing", False)
    remove_padding: bool = key(f"{A}.model.use_remove_padding", False)
    attn_implementation: str = key(f"{A}.model.override_config.attn_implementation", "")
    # the actor
    strategy: str = key(f"{ACTOR}.strategy", "")
    mini_batch: int = key(f"{ACTOR}.ppo_mini_batch_size", 1)  # prompts an actor update
    ppo_epochs: int = key(f"{ACTOR}.ppo_epochs", 1)
    actor_micro_batch: int | None = key(f"{ACTOR}.ppo_micro_batch_size_per_gpu")
    actor_max_tokens: int | None = key(f"{ACTOR}.ppo_max_token_len_per_gpu")
    dynamic_batch: bool = key(f"{ACTOR}.use_dynamic_bsz", False)
    lr: float = key(f"{ACTOR}.optim.lr", 0.0)
    lr_scheduler: str = key(f"{ACTOR}.optim.lr_scheduler_type", "constant")
    use_kl_loss: bool = key(f"{ACTOR}.use_kl_loss", False)
    kl_loss_coef: float = key(f"{ACTOR}.kl_loss_coef", 0.0)
    fsdp_size: int = key(f"{FSDP}.fsdp_size", -1)
    model_dtype: str = key(f"{FSDP}.model_dtype", "fp32")
    param_offload: bool = key(f"{FSDP}.param_offload", False)
    optimizer_offload: bool = key(f"{FSDP}.optimizer_offload", False)
    offload_policy: bool = key(f"{FSDP}.offload_policy", False)
    ref_micro_batch: int | None = key(f"{A}.ref.log_prob_micro_batch_size_per_gpu")
    ref_max_tokens: int | None = key(f"{A}.ref.log_prob_max_token_len_per_gpu")
    adv_estimator: str = key("algorithm.adv_estimator", "")
    # the rollout
    rollout_name: str = key(f"{ROLLOUT}.name", "")
    rollout_n: int = key(f"{ROLLOUT}.n", 1)  # samples a prompt: the GRPO group
    tensor_parallel: int = key(f"{ROLLOUT}.tensor_model_parallel_size", 1)
    max_num_seqs: int | None = key(f"{ROLLOUT}.max_num_seqs")
    gpu_memory_utilization: float = key(f"{ROLLOUT}.gpu_memory_utilization", 0.5)
    free_cache_engine: bool = key(f"{ROLLOUT}.free_cache_engine", True)
    log_prob_micro_batch: int | None = key(f"{ROLLOUT}.log_prob_micro_batch_size_per_gpu")
    log_prob_max_tokens: int | None = key(f"{ROLLOUT}.log_prob_max_token_len_per_gpu")
    agent_workers: int = key(f"{ROLLOUT}.agent.num_workers", 1)
    val_n: int = key(f"{ROLLOUT}.val_kwargs.n", 1)
    val_temperature: float = key(f"{ROLLOUT}.val_kwargs.temperature", 0.0)
    tool_config_path: str | None = key(f"{ROLLOUT}.multi_turn.tool_config_path")
    function_tool_path: str | None = key(f"{ROLLOUT}.multi_turn.function_tool_path")
    max_assistant_turns: int | None = key(f"{ROLLOUT}.multi_turn.max_assistant_turns")
    trace_backend: str | None = key(f"{ROLLOUT}.trace.backend")
    trace_per_worker: int | None = key(f"{ROLLOUT}.trace.max_samples_per_step_per_worker")
    trace_groups: int | None = key(GROUPS_KEY)
    # the trainer
    nnodes: int = key("trainer.nnodes", 1)
    gpus_per_node: int = key("trainer.n_gpus_per_node", 1)
    total_epochs: int = key("trainer.total_epochs", 1)
    total_training_steps: int | None = key("trainer.total_training_steps")
    test_freq: int = key("trainer.test_freq", 0)
    save_freq: int = key("trainer.save_freq", 0)
    max_ckpt_to_keep: int | None = key("trainer.max_actor_ckpt_to_keep")
    val_only: bool = key("trainer.val_only", False)
    use_v1: bool = key("trainer.use_v1", False)
    logger: tuple[str, ...] = key("trainer.logger", ())
    project_name: str = key("trainer.project_name", "")
    default_local_dir: str = key("trainer.default_local_dir", "")
    rollout_data_dir: str = key("trainer.rollout_data_dir", "")
    validation_data_dir: str = key("trainer.validation_data_dir", "")
    # the recipe's own: what the profile is for (config/gsm8k_multiturn_grpo.yaml `recipe`, a profile's own)
    card_gb: float | None = key("recipe.gpu_memory_gb")  # the card's memory
    step_seconds: tuple[float, ...] = key("recipe.step_time.seconds", ())  # a training step's: shortest, longest
    step_model: str | None = key("recipe.step_time.model")  # the model size those seconds are for
    step_source: str = key("recipe.step_time.source", "")  # where the figure comes from: estimated, measured
    run_by: str | None = key("recipe.run_by")  # a check script's profile: that script runs it, not the launcher

    @classmethod
    def of(cls, config: Any) -> ConfigView:
        """The view of a composed config (interpolations resolved). ValueError or TypeError for a value of the wrong
        kind (verl's validation names it)."""
        from omegaconf import OmegaConf

        if not OmegaConf.is_config(config):
            config = OmegaConf.create(config)
        hints = typing.get_type_hints(cls)
        values = {}
        for f in fields(cls):
            value = OmegaConf.select(config, f.metadata["key"])
            values[f.name] = f.default if value is None else _as(hints[f.name], value)
        return cls(**values)

    @classmethod
    def key_of(cls, name: str) -> str:
        """The config key a field reads."""
        return next(f.metadata["key"] for f in fields(cls) if f.name == name)

    def overrides_to(self, other: ConfigView) -> list[str]:
        """`key=value` for each value `other` changes: the hydra overrides that make this run that one."""
        return [f"{f.metadata['key']}={getattr(other, f.name)}" for f in fields(self)
                if getattr(other, f.name) != getattr(self, f.name)]

    # ---- what the values make ----------------------------------------------------------------------------

    @property
    def gpus(self) -> int:
        return self.nnodes * self.gpus_per_node

    @property
    def engines(self) -> int:
        """SGLang engines: each holds tensor_parallel GPUs."""
        return self.gpus // self.tensor_parallel

    @property
    def trajectories(self) -> int:
        """A training step's: its prompts x their samples."""
        return self.train_batch_size * self.rollout_n

    @property
    def sequence(self) -> int:
        """The configured prompt + response tokens of one trajectory."""
        return self.max_prompt_length + self.max_response_length

    @property
    def lora(self) -> int:
        """The LoRA rank verl trains with (0: full fine-tuning)."""
        return max(self.lora_rank, self.lora_rank_megatron)

    @property
    def traces(self) -> bool:
        return self.trace_backend == "weave"


def _as(hint: Any, value: Any) -> Any:
    """`value` as the field's type: int, float, bool, str, or a tuple of str (a list, or one value)."""
    from omegaconf import OmegaConf

    if typing.get_origin(hint) in (typing.Union, types.UnionType):  # X | None: an X
        hint = next(k for k in typing.get_args(hint) if k is not type(None))
    kind = hint
    if typing.get_origin(kind) is tuple:
        item = typing.get_args(kind)[0]
        values = list(value) if OmegaConf.is_list(value) or isinstance(value, (list, tuple)) else [value]
        return tuple(item(v) for v in values)
    if kind is bool:
        if not isinstance(value, bool):
            raise TypeError(f"{value!r} is not true or false")
        return value
    if kind is int and (isinstance(value, bool) or (isinstance(value, float) and not value.is_integer())):
        raise TypeError(f"{value!r} is not a whole number")
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        return value  # a number as written (0, not 0.0): the plan says it as the config does
    return kind(value)
