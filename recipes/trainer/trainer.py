"""verl's legacy trainer (`RayPPOTrainer`, trainer.use_v1=false) with a stop at a step boundary, and its TaskRunner.

Why a subclass, not verl's ESI hook: verl 0.9.1 saves early when a capacity block is about to expire
(`should_save_ckpt_esi`, read once per step after the actor update), but that check needs a step already timed
(`max_steps_duration > 0`: never in the first step of a launch), keys on a cloud's expiration timestamp, and saving
is all it does: training goes on. A stop needs the save AND the end. The subclass adds both at two points verl's
fit loop passes in every step, whatever the profiling settings:
- `_stop_profiling` (the step's work is done: update, weight sync, validation; its metrics not yet logged): if the
  launcher asked to stop (recipes/trainer/stop_request.py) and verl did not save this step itself, save it now, with
  verl's own `_save_checkpoint` (the actor's shards, `data.pt` with the dataloader's state after this step's batch,
  `latest_checkpointed_iteration.txt`), so the next launch resumes at the next step with the same data order;
- `_start_profiling` (the next step, before any work): end the loop, finishing as verl's last step does.
A request that arrives between those two points is acted on at the end of the next step. The TaskRunner is verl's
own, run with this class in place of `RayPPOTrainer` in its own process (verl names the class in main_ppo_v0 and
has no setting for it).

The W&B run: verl's Tracking calls `wandb.init(project, name, ...)` with no run id, so each launch would open a new
run. A launch that resumes from a checkpoint passes the run id kept beside the checkpoints (`WANDB_RUN_ID`, with
`WANDB_RESUME=allow`, which wandb.init reads) and the run goes on; a launch from scratch starts a new id.
"""

from __future__ import annotations

import os
import sys
import uuid
from pathlib import Path

import ray
from verl.trainer.main_ppo_v0 import TaskRunner
from verl.trainer.ppo.ray_trainer import RayPPOTrainer

from recipes.private_files import Folder
from recipes.trainer.stop_request import latest_checkpoint, record_stopped, stop_requested

WANDB_RUN_ID_FILE = "wandb_run_id"  # beside the checkpoints: the W&B run they belong to


class _StopBeforeStep(Exception):
    """Raised at the start of a step the launcher asked not to run."""


class StoppableTrainer(RayPPOTrainer):
    def fit(self):
        self._stop_after_step = False  # latched at a step's end: the next step does not start
        self._first_step = True
        self._saved_step: int | None = None
        continue_wandb_run(self.config)
        try:
            result = super().fit()
        except _StopBeforeStep:
            # what verl does after its last step, before fit returns
            if hasattr(self.actor_rollout_wg, "async_calls_finalize_fn_exec"):
                self.actor_rollout_wg.async_calls_finalize_fn_exec(blocking=True)
            self._shutdown_dump_executor()
            _finish_wandb_run(preempting=True)
            trained = self.global_steps - 1
            saved = latest_checkpoint(self._checkpoint_dir())
            record_stopped(self._checkpoint_dir(), trained, saved)
            print(f"[stop] stopped on request after step {trained}; newest checkpoint: step {saved}", flush=True)
            return None
        _finish_wandb_run(preempting=False)
        return result

    def _checkpoint_dir(self) -> str:
        return str(self.config.trainer.default_local_dir)

    def _save_checkpoint(self):
        super()._save_checkpoint()
        self._saved_step = self.global_steps

    def _start_profiling(self, do_profile: bool) -> None:
        first, self._first_step = self._first_step, False
        if self._stop_after_step or (first and stop_requested(self._checkpoint_dir())):
            raise _StopBeforeStep
        super()._start_profiling(do_profile)

    def _stop_profiling(self, do_profile: bool, run_command: bool = False) -> None:
        super()._stop_profiling(do_profile, run_command=run_command)
        if self._stop_after_step or not stop_requested(self._checkpoint_dir()):
            return
        self._stop_after_step = True
        if self.config.trainer.save_freq > 0 and self._saved_step != self.global_steps:
            print(f"[stop] stop requested: saving step {self.global_steps} before stopping", flush=True)
            self._save_checkpoint()


def continue_wandb_run(config) -> None:
    """WANDB_RUN_ID (and WANDB_RESUME=allow) for verl's wandb.init in this process: the id kept beside the
    checkpoints when this launch resumes from one, else a new id kept there. A user's own WANDB_RUN_ID wins."""
    backends = config.trainer.logger
    backends = [backends] if isinstance(backends, str) else list(backends or [])
    if "wandb" not in backends or os.environ.get("WANDB_RUN_ID"):
        return
    path = Path(str(config.trainer.default_local_dir))
    resumes = config.trainer.resume_mode == "auto" and latest_checkpoint(path) is not None
    with Folder.open(path, create=True) as folder:  # the run's own id file only, never through a link
        kept = folder.read_own(WANDB_RUN_ID_FILE) if resumes else None
        run_id = kept.decode(errors="replace").strip() if kept else ""
        if not run_id:
            run_id = uuid.uuid4().hex[:16]
            folder.write(WANDB_RUN_ID_FILE, run_id + "\n")
    os.environ["WANDB_RUN_ID"] = run_id
    os.environ.setdefault("WANDB_RESUME", "allow")
    print(f"[stop] W&B run id {run_id} ({'continued' if resumes else 'new'})", flush=True)


def _finish_wandb_run(preempting: bool) -> None:
    """The W&B run verl opened in fit, finished (marked preempting after a stop: W&B's state for a run that will be
    resumed) and W&B's service closed, while that service still answers. Left to exit, wandb's atexit hook and verl's
    Tracking.__del__ find the service already gone as Ray ends the TaskRunner and print tracebacks after every run."""
    wandb = sys.modules.get("wandb")
    if wandb is None or getattr(wandb, "run", None) is None:
        return
    try:
        if preempting:
            wandb.run.mark_preempting()
        wandb.finish()
        wandb.teardown()
    except (Exception, SystemExit) as error:  # wandb exits with its service's status: not the training's outcome
        print(f"[wandb] warning: closing W&B at the end of training: {error!r}", flush=True)


class _StoppableTaskRunner(TaskRunner.__ray_metadata__.modified_class):
    """verl's legacy TaskRunner, building StoppableTrainer: its `run` names RayPPOTrainer from main_ppo_v0's
    module, so that name is pointed at the subclass in this actor's own process before it runs."""

    def run(self, config):
        import verl.trainer.main_ppo_v0 as legacy

        legacy.RayPPOTrainer = StoppableTrainer
        return super().run(config)


# On the head node (Ray's own resource for it, as Ray Train pins its state actor), where the launcher and main_ppo run:
# on a SLURM allocation that is the batch script's step, which a preemption's SIGTERM spares, so W&B's service the
# TaskRunner starts (a Go program: it takes SIGTERM whatever mask it inherits) lives to log the step the stop saved
# (scripts/run_gsm8k_grpo.sbatch)
StoppableTaskRunner = ray.remote(resources={"node:__internal_head__": 0.001})(_StoppableTaskRunner)
