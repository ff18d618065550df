"""The schedule a config makes, by verl's rules: the train dataloader serves `data.gen_batch_size or
data.train_batch_size` prompts a step and drops the last partial batch; steps are that many batches x
trainer.total_epochs unless trainer.total_training_steps is set; a step makes `train_batch_size /
ppo_mini_batch_size x ppo_epochs` actor updates; validation takes the whole validation file in one batch, or
data.val_max_samples rows drawn at random. The preflight refuses a schedule of no step; the dry-run plan says the
rest (recipes/launch/plan.py)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from recipes.config_view import ConfigView


def rows_of(files) -> int | None:
    """Rows of the parquet files as written (their metadata, nothing read); None when a file is not there."""
    import pyarrow.parquet as pq

    total = 0
    for file in [files] if isinstance(files, str) else list(files or []):
        path = Path(os.path.expanduser(str(file)))
        if not path.is_file():
            return None
        total += pq.read_metadata(path).num_rows
    return total


@dataclass(frozen=True)
class Schedule:
    prompts: int  # per step
    n: int  # samples per prompt
    mini_batch: int  # prompts per actor update
    updates_per_step: int
    rows: int | None  # training rows (None: the file is not there yet)
    steps_per_epoch: int | None
    epochs: int
    steps: int | None  # None: depends on rows not known
    fixed_steps: bool  # trainer.total_training_steps sets them
    lr: float
    val_rows: int | None  # validation rows (None: the file is not there yet)

    @property
    def updates(self) -> int | None:
        return None if self.steps is None else self.steps * self.updates_per_step

    @property
    def trajectories_per_update(self) -> int:
        return self.mini_batch * self.n


def schedule_of(view: ConfigView) -> Schedule:
    prompts = view.gen_batch_size or view.train_batch_size
    rows = rows_of(view.train_files)
    if rows is not None and 0 < view.train_max_samples < rows:
        rows = view.train_max_samples
    per_epoch = rows // prompts if rows is not None else None
    fixed = view.total_training_steps
    steps = fixed if fixed else (per_epoch * view.total_epochs if per_epoch is not None else None)
    updates = max(1, view.train_batch_size // view.mini_batch) * (view.ppo_epochs or 1)
    return Schedule(prompts=prompts, n=view.rollout_n, mini_batch=view.mini_batch, updates_per_step=updates,
                    rows=rows, steps_per_epoch=per_epoch, epochs=view.total_epochs, steps=steps,
                    fixed_steps=bool(fixed), lr=view.lr, val_rows=rows_of(view.val_files))


def check_schedule(view: ConfigView, schedule: Schedule, report, breaks=lambda view: []) -> None:
    """A training run whose data makes no step in an epoch would start Ray, load the models and train nothing. The
    fewer prompts a step it suggests break no other rule of the preflight (`breaks`)."""
    if view.val_only or schedule.steps_per_epoch != 0:
        return
    from recipes.preflight.division import fitting_batch

    s = schedule
    capped = f" (data.train_max_samples={view.train_max_samples})" if view.train_max_samples > 0 else ""
    fitting = fitting_batch(view, breaks, most=max(1, s.rows)) if view.gen_batch_size is None else None
    fewer = f"{' '.join(view.overrides_to(fitting))}, or " if fitting else ""
    report.error(f"0 training steps: {s.rows} training rows{capped} // {s.prompts} prompts a step = 0 steps an "
                 f"epoch; prepare more rows (python data_prep/gsm8k.py writes GSM8K's 7473), or take fewer prompts a "
                 f"step ({fewer}PROFILE=1gpu_smoke: 8 a step)")
