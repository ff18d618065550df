"""verl's agent-loop worker and manager, with what tracing needs in every worker process.

Configured by `actor_rollout_ref.rollout.agent.agent_loop_manager_class:
recipes.gsm8k.worker.TracedAgentLoopManager` (legacy trainer, `trainer.use_v1=false`, as the recipe runs).
verl's AgentLoopManager keeps an `agent_loop_workers_class` it finds already set; ours is the worker below,
which, in each worker process:
- points weave at its node's trace relay when the launcher runs one (recipes.trace_relay.client.use_trace_relay:
  the URL the launcher handed down on one node; on a Ray cluster, its node's relay found by name from the config),
- makes a failing weave.init switch tracing off instead of killing the worker (guard_trace_init), before
  verl's AgentLoopWorker.__init__ calls RolloutTraceConfig.init, whatever the tool set, and keeps weave from
  logging a link per traced call (quiet_call_links: set here, in the worker, whatever environment Ray gave it),
- traces a GRPO group as one Weave thread and finishes its roots with the group's reward mean and verl's
  advantages once the step's rewards are in (recipes/tracing/groups.py),
- with the launcher's trace budget (recipes.tracing.volume.GROUPS_KEY), traces the prompts its place in verl's
  split gives it this step (`groups_on_worker`), so fewer groups than workers still trace whole groups,
- flushes weave at the end of every generate_sequences (bounded, off the event loop): Ray async actors never
  run atexit, so calls still queued when training ends would otherwise be lost.
The manager adds the tool calls that ran past their bound (recipes/gsm8k/tool_timeout.py) to verl's agent-loop
metrics: `timing_s/agent_loop/tool_timeouts/{sum,max}` in the step's metrics (verl files its agent-loop counts there
too).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

import numpy as np
import ray
from omegaconf import OmegaConf
from verl.experimental.agent_loop.agent_loop import AgentLoopManager, AgentLoopWorker
from verl.protocol import DataProto

from recipes.gsm8k.tool_timeout import TOOL_TIMEOUTS
from recipes.trace_relay.client import use_trace_relay
from recipes.tracing.flush import TraceFlusher
from recipes.tracing.groups import MEMBER, close_step, group_member
from recipes.tracing.guard import guard_trace_init
from recipes.tracing.volume import GROUPS_KEY, groups_on_worker

logger = logging.getLogger(__name__)


class TracedAgentLoopWorker(AgentLoopWorker):
    def __init__(self, *args, **kwargs):
        use_trace_relay(args[0] if args else kwargs.get("config"))  # verl passes the trainer config first
        guard_trace_init()
        self.trace_flusher = TraceFlusher()
        self.trace_slot: int | None = None  # this worker's place in verl's split, handed by the manager
        super().__init__(*args, **kwargs)

    def set_trace_slot(self, slot: int) -> None:
        self.trace_slot = slot

    async def generate_sequences(self, batch: DataProto) -> DataProto:
        from verl.utils.rollout_trace import RolloutTraceConfig

        self._trace_this_step(batch.meta_info)
        output = None
        try:
            output = await super().generate_sequences(batch)
        finally:  # a failed step still sends the roots it held
            close_step(RolloutTraceConfig.get_client(), batch, output, self.config)
        await self.trace_flusher.flush()
        return output

    async def _run_agent_loop(self, sampling_params, trajectory, *, agent_name, trace=True, **kwargs):
        member = group_member(trajectory, kwargs.get("uid"), trace)
        if member is None:
            return await super()._run_agent_loop(sampling_params, trajectory, agent_name=agent_name, trace=trace,
                                                 **kwargs)
        import weave

        MEMBER.set(member)  # this trajectory's own task: verl runs each in one (asyncio.create_task)
        with weave.thread(member.thread_id):
            return await super()._run_agent_loop(sampling_params, trajectory, agent_name=agent_name, trace=trace,
                                                 **kwargs)

    def _trace_this_step(self, meta_info: dict) -> None:
        """With the launcher's GROUPS_KEY: this worker's share of the step's traced groups, as verl's own per-call
        sampling reads it (AgentLoopWorker.generate_sequences reads max_samples_per_step_per_worker each call;
        0 traces nothing there)."""
        from verl.utils.rollout_trace import RolloutTraceConfig

        groups = OmegaConf.select(self.config, GROUPS_KEY)
        trace = RolloutTraceConfig.get_instance()
        if groups is None or trace.backend is None:
            return
        if self.trace_slot is None:
            logger.warning("agent-loop worker without its place in verl's split: tracing verl's "
                           "max_samples_per_step_per_worker prompts, not the launcher's %s groups a step", groups)
            return
        workers = int(self.config.actor_rollout_ref.rollout.agent.num_workers)
        trace.max_samples_per_step_per_worker = groups_on_worker(self.trace_slot, workers, int(groups),
                                                                 int(meta_info.get("global_steps", 0)))


class TracedAgentLoopManager(AgentLoopManager):
    agent_loop_workers_class = ray.remote(TracedAgentLoopWorker)

    async def _init_agent_loop_workers(self):
        await super()._init_agent_loop_workers()
        # verl hands worker i the i-th chunk of every batch (AgentLoopManager.generate_sequences): its place
        with contextlib.suppress(AttributeError):  # a worker class of another kind: verl's sampling alone
            await asyncio.gather(*[worker.set_trace_slot.remote(slot)
                                   for slot, worker in enumerate(self.agent_loop_workers)])

    def _performance_metrics(self, metrics, output: DataProto) -> dict[str, float]:
        timing = super()._performance_metrics(metrics, output)
        timeouts = output.non_tensor_batch.get(TOOL_TIMEOUTS)
        if timeouts is not None and len(timeouts):
            timing[f"agent_loop/{TOOL_TIMEOUTS}/sum"] = float(np.sum(timeouts))
            timing[f"agent_loop/{TOOL_TIMEOUTS}/max"] = float(np.max(timeouts))
        return timing
