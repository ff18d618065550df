"""What the preflight works out of a launch, once, for its checks and for the dry run's plan: the composed config's
view, where the model is, the schedule the data makes, the memory plan and the shape of the traces."""

from __future__ import annotations

from dataclasses import dataclass

from omegaconf import DictConfig

from recipes.config_view import ConfigView
from recipes.models import ModelSource, resolve_model
from recipes.preflight.memory import MemoryPlan, plan_for
from recipes.preflight.schedule import Schedule, schedule_of
from recipes.tracing.volume import TraceShape


@dataclass(frozen=True)
class RunFacts:
    config: DictConfig  # as main_ppo will compose it
    view: ConfigView
    model: ModelSource
    schedule: Schedule
    memory: MemoryPlan | None  # None: not planned (memory_why says why)
    memory_why: str
    trace: TraceShape | None  # None: nothing traced


def facts_of(config: DictConfig, gpu_memory_gb: float | None = None) -> RunFacts:
    """`gpu_memory_gb`: the GPU_MEMORY_GB knob (the memory plan's GPU where nvidia-smi does not answer)."""
    view = ConfigView.of(config)
    model = resolve_model(view.model_path)
    schedule = schedule_of(view)
    memory, why = plan_for(view, model, gpu_memory_gb)
    trace = TraceShape.of(view, steps=schedule.steps) if view.traces else None
    return RunFacts(config, view, model, schedule, memory, why, trace)
