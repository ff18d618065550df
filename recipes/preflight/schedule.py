"""The schedule a config makes, by verl's rules: the train dataloader serves `data.gen_batch_size or
data.train_batch_size` prompts a step and drops the last partial batch; steps are that many batches x
trainer.total_epochs unless trainer.total_training_steps is set; a step makes `train_batch_size /
ppo_mini_batch_size x ppo_epochs` actor updates. The dry-run plan says it (recipes/launch/algorithm.py) and the
preflight refuses a schedule of no step."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

ACTOR = "actor_rollout_ref.actor"


def _get(config: DictConfig, key: str):
    return OmegaConf.select(config, key)


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
    lr: float

    @property
    def updates(self) -> int | None:
        return None if self.steps is None else self.steps * self.updates_per_step

    @property
    def trajectories_per_update(self) -> int:
        return self.mini_batch * self.n


def schedule_of(config: DictConfig) -> Schedule:
    prompts = _get(config, "data.gen_batch_size") or _get(config, "data.train_batch_size")
    mini = _get(config, f"{ACTOR}.ppo_mini_batch_size")
    rows = rows_of(_get(config, "data.train_files"))
    cap = _get(config, "data.train_max_samples") or -1
    if rows is not None and 0 < cap < rows:
        rows = cap
    per_epoch = rows // prompts if rows is not None else None
    epochs = _get(config, "trainer.total_epochs")
    fixed = _get(config, "trainer.total_training_steps")
    steps = fixed if fixed else (per_epoch * epochs if per_epoch is not None else None)
    updates = max(1, _get(config, "data.train_batch_size") // mini) * (_get(config, f"{ACTOR}.ppo_epochs") or 1)
    return Schedule(prompts=prompts, n=_get(config, "actor_rollout_ref.rollout.n"), mini_batch=mini,
                    updates_per_step=updates, rows=rows, steps_per_epoch=per_epoch, epochs=epochs, steps=steps,
                    lr=_get(config, f"{ACTOR}.optim.lr"))




def check_schedule(config: DictConfig, report) -> None:
    """A training run whose data makes no step in an epoch would start Ray, load the models and train nothing."""
    if _get(config, "trainer.val_only"):
        return
    s = schedule_of(config)
    if s.steps_per_epoch != 0:
        return
    capped = f" (data.train_max_samples={_get(config, 'data.train_max_samples')})" if \
        (_get(config, "data.train_max_samples") or -1) > 0 else ""
    report.error(f"0 training steps: {s.rows} training rows{capped} // {s.prompts} prompts a step = 0 steps an "
                 f"epoch; prepare more rows (python data_prep/gsm8k.py writes GSM8K's 7473), or take fewer prompts a "
                 f"step (data.train_batch_size={max(1, s.rows)} actor_rollout_ref.actor.ppo_mini_batch_size="
                 f"{max(1, s.rows)}, or PROFILE=1gpu_smoke: 8 a step)")
