"""What a launch would do, in a dozen lines read from the composed config: the launcher's DRY_RUN prints these
(as gsm8k-preflight --print-plan does) and writes the full config to a file instead of the console."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from recipes.launch.algorithm import (
    algorithm_line,
    differences,
    profile_of,
    reference_config,
    schedule_of,
    steps_text,
    validation_line,
)
from recipes.preflight.checks import on_cpu_platform

# Said once per launch: verl logs "Legacy trainer ... deprecated" at start, and the recipe chooses it on purpose.
LEGACY_TRAINER_NOTE = (
    "legacy (trainer.use_v1=false), on purpose: verl 0.9.1's V1 trainer never traces agent-loop rollouts, and "
    "verl's neo branch keeps the legacy trainer; verl's 'Legacy trainer ... deprecated' warning is about this"
)


def _get(config: DictConfig, key: str):
    return OmegaConf.select(config, key)


def _tools(config: DictConfig) -> str:
    path = _get(config, "actor_rollout_ref.rollout.multi_turn.tool_config_path")
    if not path:
        return "none (no tool config: single answers)"
    turns = _get(config, "actor_rollout_ref.rollout.multi_turn.max_assistant_turns")
    return f"{Path(path).stem} ({path}), at most {turns} assistant turns"


def _model(config: DictConfig) -> str:
    model = str(_get(config, "actor_rollout_ref.model.path"))
    rank = _get(config, "actor_rollout_ref.model.lora_rank") or 0
    if rank > 0:
        merged = "merged" if _get(config, "actor_rollout_ref.model.lora.merge") else "unmerged"
        model += f" + LoRA rank {rank}, alpha {_get(config, 'actor_rollout_ref.model.lora_alpha')} ({merged})"
    return model


def _hardware(config: DictConfig) -> str:
    nodes, gpus = _get(config, "trainer.nnodes"), _get(config, "trainer.n_gpus_per_node")
    tp = _get(config, "actor_rollout_ref.rollout.tensor_model_parallel_size")
    engines = nodes * gpus // tp
    # on the CPU platform n_gpus_per_node counts CPU ranks (Ray's logical GPUs): say so, not "GPU(s)"
    ranks = "CPU rank(s) on scripts/harness/cpu_backend's stand-ins, no GPU" if on_cpu_platform() else "GPU(s)"
    return (f"{nodes} node(s) x {gpus} {ranks}; rollout {_get(config, 'actor_rollout_ref.rollout.name')}, "
            f"TP {tp}: {engines} engine(s) of up to {_get(config, 'actor_rollout_ref.rollout.max_num_seqs')} sequences")


def _batch(config: DictConfig) -> str:
    prompt, response = _get(config, "data.max_prompt_length"), _get(config, "data.max_response_length")
    lengths = f"prompt/response {prompt}/{response} tokens"
    if _get(config, "trainer.val_only"):
        n, temperature = (_get(config, f"actor_rollout_ref.rollout.val_kwargs.{k}") for k in ("n", "temperature"))
        return f"validation only: {n} sample(s) per prompt at temperature {temperature}; {lengths}"
    prompts, n = _get(config, "data.train_batch_size"), _get(config, "actor_rollout_ref.rollout.n")
    return f"{prompts} prompts x {n} samples = {prompts * n} trajectories per step; {lengths}"


def _memory(config: DictConfig) -> str | None:
    """The memory plan's row (recipes/preflight/memory.py); None where there is none to make (CPU stand-ins, a
    model whose size is unknown here)."""
    from recipes.preflight.memory import plan_for

    plan, _why = plan_for(config)
    return plan.row() if plan else None


def _schedule(config: DictConfig) -> str:
    if _get(config, "trainer.val_only"):
        return "validation only (trainer.val_only): one pass over the validation data; nothing trained or saved"
    length = steps_text(config)
    test_freq, save_freq = _get(config, "trainer.test_freq"), _get(config, "trainer.save_freq")
    validation = f"validation every {test_freq} steps" if test_freq > 0 else "no validation during training"
    if save_freq > 0:  # verl saves when the step is a multiple of save_freq, and at the last step
        keep = _get(config, "trainer.max_actor_ckpt_to_keep")
        saves = f"checkpoint every {save_freq} ({f'last {keep} kept' if keep else 'all kept'})"
    else:
        saves = f"no checkpoints (trainer.save_freq={save_freq})"
    return f"{length}; {validation}, {saves}"


def _tracing(config: DictConfig) -> str:
    logger = _get(config, "trainer.logger")
    logger = ",".join(logger) if isinstance(logger, list) or OmegaConf.is_list(logger) else str(logger)
    where = f"W&B project {_get(config, 'trainer.project_name')}, logger {logger}"
    if _get(config, "actor_rollout_ref.rollout.trace.backend") != "weave":
        return f"off; {where}"
    from recipes.tracing.volume import describe

    return f"{describe(trace_shape(config))}; {where}"


def trace_shape(config: DictConfig):
    """What sets the run's trace volume, its steps as verl will count them (the whole run's traces: per run)."""
    from dataclasses import replace

    from recipes.tracing.volume import TraceShape

    shape = TraceShape.of(config)
    return shape if shape.steps is not None else replace(shape, steps=schedule_of(config).steps)


def _outputs(config: DictConfig) -> str:
    dirs = {key: str(_get(config, f"trainer.{key}")) for key in
            ("default_local_dir", "rollout_data_dir", "validation_data_dir")}
    parents = {str(Path(d).parent) for d in dirs.values()}
    if len(parents) == 1:
        return f"{parents.pop()} (checkpoints/, rollouts/, validation/)"
    return "; ".join(f"{key} {value}" for key, value in dirs.items())


def plan_rows(config: DictConfig, config_file: str | None = None,
              overrides: list[str] | None = None) -> list[tuple[str, str]]:
    """(what, value) rows: model, data, tools, hardware, batch, memory, algorithm, schedule, validate, differs (a
    profile that changes the algorithm against the recipe's own, given the launch's overrides), tracing, outputs,
    trainer, config."""
    training = not _get(config, "trainer.val_only")
    rows = [("model", _model(config)),
            ("data", f"train {_get(config, 'data.train_files')}, validation {_get(config, 'data.val_files')}"),
            ("tools", _tools(config)), ("hardware", _hardware(config)), ("batch", _batch(config))]
    memory = _memory(config)
    if memory:
        rows.append(("memory", memory))
    if training:
        rows.append(("algorithm", algorithm_line(config)))
    rows += [("schedule", _schedule(config)), ("validate", validation_line(config))]
    reference = reference_config(overrides) if training and overrides else None
    changed = differences(config, reference, profile_of(overrides)) if reference is not None else None
    if changed:
        rows.append(("differs", changed))
    rows += [("tracing", _tracing(config)), ("outputs", _outputs(config))]
    if not _get(config, "trainer.use_v1"):
        rows.append(("trainer", LEGACY_TRAINER_NOTE))
    if config_file:
        rows.append(("config", f"{config_file} (the full composed config)"))
    return rows


def plan_lines(config: DictConfig, config_file: str | None = None, overrides: list[str] | None = None) -> list[str]:
    return [f"#   {key:<10}{value}" for key, value in plan_rows(config, config_file, overrides)]


def write_config(config: DictConfig, path: str) -> None:
    """The composed config as YAML, written atomically (a reader never sees half a file)."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(OmegaConf.to_yaml(config))
        os.chmod(tmp, 0o644)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
