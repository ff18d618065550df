"""What a launch's config makes of the algorithm, for the dry-run plan: optimizer updates per step, steps, the
trajectories each update sees, what validation scores; and what a profile changes of it against the recipe's own
profile (8xh100), so that a profile that changes more than the hardware says so.

verl's rules, read here: the train dataloader serves `data.gen_batch_size or data.train_batch_size` prompts a step and
drops the last partial batch; steps are that many batches x trainer.total_epochs unless trainer.total_training_steps
is set; a step makes `train_batch_size / ppo_mini_batch_size x ppo_epochs` actor updates (the mini-batch counts
prompts, each with rollout.n trajectories); validation takes the whole validation file in one batch, or
data.val_max_samples rows drawn at random (verl's data.seed is unset, so a new draw each run).
"""

from __future__ import annotations

from omegaconf import DictConfig, OmegaConf

from recipes.preflight.schedule import ACTOR, rows_of, schedule_of

REFERENCE_PROFILE = "8xh100"  # the recipe's own values (config/profile/8xh100.yaml changes nothing)


def _get(config: DictConfig, key: str):
    return OmegaConf.select(config, key)


def algorithm_line(config: DictConfig) -> str:
    s = schedule_of(config)
    scheduler = _get(config, f"{ACTOR}.optim.lr_scheduler_type") or "constant"
    kl = f"KL loss {_get(config, f'{ACTOR}.kl_loss_coef')}" if _get(config, f"{ACTOR}.use_kl_loss") else "no KL loss"
    if s.updates_per_step == 1:
        updates = f"1 actor update per step (mini-batch = the step's {s.mini_batch} prompts"
    else:  # every update after the first trains on trajectories an older policy sampled
        updates = (f"{s.updates_per_step} actor updates per step (mini-batches of {s.mini_batch} of the step's "
                   f"{s.prompts} prompts: all but the first off-policy")
    return (f"{_get(config, 'algorithm.adv_estimator').upper()}, lr {s.lr:g} ({scheduler}), {kl}; {updates}, "
            f"{s.trajectories_per_update} trajectories each)")


def steps_text(config: DictConfig) -> str:
    s = schedule_of(config)
    if _get(config, "trainer.total_training_steps"):
        return f"{s.steps} steps (trainer.total_training_steps)"
    if s.rows is None:
        return f"{s.epochs} epochs x (training rows // {s.prompts}) steps (the training file is not there yet)"
    return f"{s.steps} steps = {s.epochs} epochs x {s.steps_per_epoch} ({s.rows} rows // {s.prompts})"


def validation_line(config: DictConfig) -> str:
    """How many questions validation scores, how, and at what length."""
    rows = rows_of(_get(config, "data.val_files"))
    cap = _get(config, "data.val_max_samples") or -1
    if cap > 0 and (rows is None or cap < rows):
        of = "" if rows is None else f" of {rows}"
        questions = f"{cap}{of} questions, drawn at random each run (data.val_max_samples={cap}),"
    else:
        questions = "every question of the validation file" if rows is None else f"all {rows} questions"
    val = "actor_rollout_ref.rollout.val_kwargs"
    return (f"{questions} x {_get(config, f'{val}.n')} sample(s) at temperature {_get(config, f'{val}.temperature')}, "
            f"up to {_get(config, 'data.max_response_length')} response tokens and "
            f"{_get(config, 'actor_rollout_ref.rollout.multi_turn.max_assistant_turns')} assistant turns")


def profile_of(overrides: list[str]) -> str | None:
    chosen = [o.split("=", 1)[1] for o in overrides if o.lstrip("+").startswith("profile=")]
    return chosen[-1] if chosen else None


def reference_config(overrides: list[str]) -> DictConfig | None:
    """The same launch with the reference profile in place of its own (None when it is the reference)."""
    profile = profile_of(overrides)
    if profile in (None, REFERENCE_PROFILE):
        return None
    from recipes.preflight.compose import compose_config

    return compose_config([o for o in overrides if not o.lstrip("+").startswith("profile=")] +
                          [f"profile={REFERENCE_PROFILE}"])


def differences(config: DictConfig, reference: DictConfig, profile: str) -> str | None:
    """What the profile changes of the algorithm against the reference, with both values; None if nothing."""
    mine, ref = schedule_of(config), schedule_of(reference)
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
