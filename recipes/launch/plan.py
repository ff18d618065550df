"""What a launch would do, in a dozen lines read from what the preflight worked out (recipes/preflight/facts.py):
the launcher's DRY_RUN prints these (as gsm8k-preflight --print-plan does) and writes the full config to a file
instead of the console. The algorithm's rows say what the config makes of it: optimizer updates per step, steps,
the trajectories each update sees, what validation scores (the schedule: verl's rules, recipes/preflight/
schedule.py); and what a profile changes of it against the recipe's own profile (8xh100), so that a profile that
changes more than the hardware says so."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from recipes.config_view import ConfigView
from recipes.models import ModelSize
from recipes.preflight.checks import on_cpu_platform
from recipes.preflight.facts import RunFacts
from recipes.preflight.schedule import Schedule

# Said once per launch: verl logs "Legacy trainer ... deprecated" at start, and the recipe chooses it on purpose.
LEGACY_TRAINER_NOTE = (
    "legacy (trainer.use_v1=false), on purpose: verl 0.9.1's V1 trainer never traces agent-loop rollouts; verl's "
    "'Legacy trainer ... deprecated' warning is about this"
)
REFERENCE_PROFILE = "8xh100"  # the recipe's own values (config/profile/8xh100.yaml changes nothing)


def algorithm_line(view: ConfigView, s: Schedule) -> str:
    kl = f"KL loss {view.kl_loss_coef}" if view.use_kl_loss else "no KL loss"
    if s.updates_per_step == 1:
        updates = f"1 actor update per step (mini-batch = the step's {s.mini_batch} prompts"
    else:  # every update after the first trains on trajectories an older policy sampled
        updates = (f"{s.updates_per_step} actor updates per step (mini-batches of {s.mini_batch} of the step's "
                   f"{s.prompts} prompts: all but the first off-policy")
    return (f"{view.adv_estimator.upper()}, lr {s.lr:g} ({view.lr_scheduler}), {kl}; {updates}, "
            f"{s.trajectories_per_update} trajectories each)")


def steps_text(s: Schedule) -> str:
    if s.fixed_steps:
        return f"{s.steps} steps (trainer.total_training_steps)"
    if s.rows is None:
        return f"{s.epochs} epochs x (training rows // {s.prompts}) steps (the training file is not there yet)"
    return f"{s.steps} steps = {s.epochs} epochs x {s.steps_per_epoch} ({s.rows} rows // {s.prompts})"


def validation_line(view: ConfigView, s: Schedule) -> str:
    """How many questions validation scores, how, and at what length."""
    rows, cap = s.val_rows, view.val_max_samples
    if cap > 0 and (rows is None or cap < rows):
        of = "" if rows is None else f" of {rows}"
        questions = f"{cap}{of} questions, drawn at random each run (data.val_max_samples={cap}),"
    else:
        questions = "every question of the validation file" if rows is None else f"all {rows} questions"
    return (f"{questions} x {view.val_n} sample(s) at temperature {view.val_temperature}, up to "
            f"{view.max_response_length} response tokens and {view.max_assistant_turns} assistant turns")


def profile_of(overrides: list[str]) -> str | None:
    chosen = [o.split("=", 1)[1] for o in overrides if o.lstrip("+").startswith("profile=")]
    return chosen[-1] if chosen else None


def reference_schedule(overrides: list[str]) -> Schedule | None:
    """The schedule of the same launch with the reference profile in place of its own (None when it is the
    reference)."""
    profile = profile_of(overrides)
    if profile in (None, REFERENCE_PROFILE):
        return None
    from recipes.preflight.compose import compose_config
    from recipes.preflight.schedule import schedule_of

    return schedule_of(ConfigView.of(compose_config([o for o in overrides if not o.lstrip("+").startswith("profile=")]
                                                    + [f"profile={REFERENCE_PROFILE}"])))


def differences(mine: Schedule, ref: Schedule, profile: str) -> str | None:
    """What the profile changes of the algorithm against the reference, with both values; None if nothing."""
    changed = [f"{label} {a:g} ({REFERENCE_PROFILE}: {b:g})" for label, a, b in (
        ("prompts per step", mine.prompts, ref.prompts), ("samples per prompt", mine.n, ref.n),
        ("mini-batch", mine.mini_batch, ref.mini_batch), ("updates per step", mine.updates_per_step,
                                                          ref.updates_per_step),
        ("epochs", mine.epochs, ref.epochs), ("lr", mine.lr, ref.lr)) if a != b]
    if mine.steps != ref.steps and None not in (mine.steps, ref.steps):
        changed.append(f"{mine.updates} updates of {mine.trajectories_per_update} trajectories "
                       f"({REFERENCE_PROFILE}: {ref.updates} of {ref.trajectories_per_update})")
    if not changed:
        return None
    same_lr = f", at the same lr {mine.lr:g}" if mine.lr == ref.lr else ""
    return (f"the algorithm, against {REFERENCE_PROFILE}: " + "; ".join(changed) + same_lr +
            f" (why: config/profile/{profile}.yaml)")


def _tools(view: ConfigView) -> str:
    path, functions = view.tool_config_path, view.function_tool_path
    if not path and not functions:
        return "none (no tool config: single answers)"
    turns = f"at most {view.max_assistant_turns} assistant turns"
    if not functions:
        return f"{Path(path).stem} ({path}), {turns}"
    from verl.tools.function_tool import load_function_tools_from_path

    names = ", ".join(tool.name for tool in load_function_tools_from_path(functions))  # loaded by the preflight
    where = f"{Path(path).stem} ({path}) and " if path else ""
    return f"{where}the functions {names} ({functions}), {turns}"


def _model(view: ConfigView) -> str:
    model = view.model_path
    if view.lora_rank > 0:
        merged = "merged" if view.lora_merge else "unmerged"
        model += f" + LoRA rank {view.lora_rank}, alpha {view.lora_alpha} ({merged})"
    return model


def _hardware(view: ConfigView) -> str:
    # on the CPU platform n_gpus_per_node counts CPU ranks (Ray's logical GPUs): say so, not "GPU(s)"
    ranks = "CPU rank(s) on scripts/harness/cpu_backend's stand-ins, no GPU" if on_cpu_platform() else "GPU(s)"
    return (f"{view.nnodes} node(s) x {view.gpus_per_node} {ranks}; rollout {view.rollout_name}, "
            f"TP {view.tensor_parallel}: {view.engines} engine(s) of up to {view.max_num_seqs} sequences")


def _batch(view: ConfigView) -> str:
    lengths = f"prompt/response {view.max_prompt_length}/{view.max_response_length} tokens"
    if view.val_only:
        return f"validation only: {view.val_n} sample(s) per prompt at temperature {view.val_temperature}; {lengths}"
    return (f"{view.train_batch_size} prompts x {view.rollout_n} samples = {view.trajectories} trajectories per "
            f"step; {lengths}")


def _schedule(view: ConfigView, schedule: Schedule) -> str:
    if view.val_only:
        return "validation only (trainer.val_only): one pass over the validation data; nothing trained or saved"
    validation = f"validation every {view.test_freq} steps" if view.test_freq > 0 else "no validation during training"
    if view.save_freq > 0:  # verl saves when the step is a multiple of save_freq, and at the last step
        keep = view.max_ckpt_to_keep
        saves = f"checkpoint every {view.save_freq} ({f'last {keep} kept' if keep else 'all kept'})"
    else:
        saves = f"no checkpoints (trainer.save_freq={view.save_freq})"
    return f"{steps_text(schedule)}; {validation}, {saves}"


def _duration(seconds: float) -> str:
    """A step's or a run's time as a reader counts it: seconds, minutes, hours or days, 2-3 figures."""
    for unit, size, limit in (("s", 1, 120), ("min", 60, 7200), ("h", 3600, 2 * 86400), ("days", 86400, None)):
        if limit is None or seconds < limit:
            value = seconds / size
            return f"{value:.0f} {unit}" if value >= 10 else f"{value:.2g} {unit}"
    raise AssertionError("unreachable")


def _span(low: float, high: float) -> str:
    """`2-4 min`, `60-90 s`, `34 s`: one unit, the high end's."""
    text, unit = _duration(high).rsplit(" ", 1)
    if round(low, 6) == round(high, 6):
        return f"{text} {unit}"
    size = {"s": 1, "min": 60, "h": 3600, "days": 86400}[unit]
    value = low / size
    return f"{value:.0f}-{text} {unit}" if value >= 10 else f"{value:.2g}-{text} {unit}"


def time_figures(view: ConfigView, schedule: Schedule, size: ModelSize | None,
                 made_for: ModelSize | None) -> tuple[str, str | None, str] | None:
    """(a step's time, the run's, where the figure comes from) for the run's steps at the profile's step time
    (recipe.step_time), scaled by parameters where the run's model (`size`) is not the one it was made for
    (`made_for`); None when the profile has none."""
    if not view.step_seconds:
        return None
    low, high = view.step_seconds[0], view.step_seconds[-1]
    source = view.step_source
    if made_for is not None and size is not None:
        scale = size.parameters / made_for.parameters
        if abs(scale - 1) > 0.05:
            low, high = low * scale, high * scale
            source += (f"; made for {view.step_model}, x{scale:.2g} for this model's {size.parameters / 1e9:.2g}B "
                       "parameters")
    if schedule.steps is None:
        return _span(low, high), None, source
    return _span(low, high), f"~{_span(low * schedule.steps, high * schedule.steps)}", source


def _time(facts: RunFacts) -> str:
    figures = time_figures(facts.view, facts.schedule, facts.size, facts.step_made_for)
    if figures is None:
        return "no step time for this profile (its recipe.step_time): not estimated"
    step, run, source = figures
    if run is None:
        return f"{step} a step ({source}), the steps the training file makes once it is there"
    return (f"{run}: {facts.schedule.steps} steps x {step} a step ({source}); validations and checkpoints not "
            "counted")


def _tracing(view: ConfigView, trace) -> str:
    where = f"W&B project {view.project_name}, logger {','.join(view.logger)}"
    if trace is None:
        return f"off; {where}"
    from recipes.tracing.volume import describe

    return f"{describe(trace)}; {where}"


def _outputs(view: ConfigView) -> str:
    dirs = {"default_local_dir": view.default_local_dir, "rollout_data_dir": view.rollout_data_dir,
            "validation_data_dir": view.validation_data_dir}
    parents = {str(Path(d).parent) for d in dirs.values()}
    if len(parents) == 1:
        return f"{parents.pop()} (checkpoints/, rollouts/, validation/)"
    return "; ".join(f"{key} {value}" for key, value in dirs.items())


def plan_rows(facts: RunFacts, config_file: str | None = None,
              overrides: list[str] | None = None) -> list[tuple[str, str]]:
    """(what, value) rows: model, data, tools, hardware, batch, memory, algorithm, schedule, validate, differs (a
    profile that changes the algorithm against the recipe's own, given the launch's overrides), tracing, outputs,
    trainer, config."""
    view, schedule = facts.view, facts.schedule
    training = not view.val_only
    reference = reference_schedule(overrides) if training and overrides else None
    rows = [("model", _model(view)),
            ("data", f"train {','.join(view.train_files)}, validation {','.join(view.val_files)}"),
            ("tools", _tools(view)), ("hardware", _hardware(view)), ("batch", _batch(view))]
    if facts.memory:
        rows.append(("memory", facts.memory.row()))
    if training:
        rows.append(("algorithm", algorithm_line(view, schedule)))
    rows += [("schedule", _schedule(view, schedule))]
    if training:
        rows.append(("time", _time(facts)))
    rows.append(("validate", validation_line(view, schedule)))
    changed = differences(schedule, reference, profile_of(overrides)) if reference is not None else None
    if changed:
        rows.append(("differs", changed))
    rows += [("tracing", _tracing(view, facts.trace)), ("outputs", _outputs(view))]
    if not view.use_v1:
        rows.append(("trainer", LEGACY_TRAINER_NOTE))
    if config_file:
        rows.append(("config", f"{config_file} (the full composed config)"))
    return rows


def plan_lines(facts: RunFacts, config_file: str | None = None, overrides: list[str] | None = None) -> list[str]:
    return [f"#   {key:<10}{value}" for key, value in plan_rows(facts, config_file, overrides)]


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
