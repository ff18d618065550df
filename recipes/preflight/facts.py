"""What the preflight works out of a launch, once, for its checks and for the dry run's plan: the composed config's
view, where the model is, the schedule the data makes, the memory plan and the shape of the traces."""

from __future__ import annotations

from dataclasses import dataclass

from omegaconf import DictConfig

from recipes.config_view import ConfigView
from recipes.models import ModelSize, ModelSource, resolve_model, table_entry
from recipes.preflight.division import CONCURRENCY, DIVISION, MEMORY, NO_STEP, SPLIT, divides
from recipes.preflight.memory import MemoryPlan, plan_for, plan_memory, plan_trouble
from recipes.preflight.rollout_checks import concurrency_shortfall
from recipes.preflight.schedule import Schedule, schedule_of
from recipes.tracing.volume import TraceShape, split_refusal


@dataclass(frozen=True)
class RunFacts:
    config: DictConfig  # as main_ppo will compose it
    view: ConfigView
    model: ModelSource
    size: ModelSize | None  # the model's (its config.json here, else the recipe's table); None: not known
    step_made_for: ModelSize | None  # the model size the profile's step time is for (recipe.step_time.model)
    schedule: Schedule
    memory: MemoryPlan | None  # None: not planned (memory_why says why)
    memory_why: str
    trace: TraceShape | None  # None: nothing traced

    def breaks(self, view: ConfigView) -> list[str]:
        """The rules of the preflight that `view` (this run with some values changed: a fix the preflight would
        suggest) breaks, by name, errors and warnings alike, as far as the config's values decide them: the GPU
        division, whole GRPO groups on each agent-loop worker, every trajectory of a step in flight at once, the
        memory plan on the same GPUs, a step in an epoch. Empty: the fix passes as given."""
        broken = [] if divides(view) else [DIVISION]
        if view.traces and split_refusal(TraceShape.of(view)):
            broken.append(SPLIT)
        if concurrency_shortfall(view):
            broken.append(CONCURRENCY)
        plan = self.memory
        if plan is not None and plan_trouble(view, plan_memory(view, plan.size, plan.size_source, plan.gpu,
                                                               plan.gpu_source)):
            broken.append(MEMORY)
        rows = self.schedule.rows
        if rows is not None and not view.val_only and rows // (view.gen_batch_size or view.train_batch_size) == 0:
            broken.append(NO_STEP)
        return broken


def facts_of(config: DictConfig, gpu_memory_gb: float | None = None) -> RunFacts:
    """`gpu_memory_gb`: the GPU_MEMORY_GB knob (the memory plan's GPU where nvidia-smi does not answer)."""
    view = ConfigView.of(config)
    model = resolve_model(view.model_path)
    made_for = table_entry(view.step_model) if view.step_model else None
    schedule = schedule_of(view)
    memory, why = plan_for(view, model, gpu_memory_gb)
    trace = TraceShape.of(view, steps=schedule.steps) if view.traces else None
    return RunFacts(config, view, model, model.size()[0], made_for and ModelSize.from_config(*made_for), schedule,
                    memory, why, trace)
