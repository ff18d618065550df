"""verl's agent-loop worker and manager, with what tracing needs in every worker process.

Configured by `actor_rollout_ref.rollout.agent.agent_loop_manager_class:
recipes.rollout.worker.TracedAgentLoopManager` (legacy trainer, `trainer.use_v1=false`, as the recipe runs).
verl's AgentLoopManager keeps an `agent_loop_workers_class` it finds already set; ours is the worker below,
which, in each worker process:
- points weave at its node's trace relay when the launcher runs one (recipes.tracing.relay_client.use_trace_relay: the
URL the
  launcher handed down on one node; on a Ray cluster, its node's relay found by name from the config),
- makes a failing weave.init switch tracing off instead of killing the worker (guard_trace_init), before
  verl's AgentLoopWorker.__init__ calls RolloutTraceConfig.init, whatever the tool set, and keeps weave from
  logging a link per traced call (quiet_call_links: set here, in the worker, whatever environment Ray gave it),
- flushes weave at the end of every generate_sequences (bounded, off the event loop): Ray async actors never
  run atexit, so calls still queued when training ends would otherwise be lost.
The manager adds the tool calls that ran past their bound (recipes/rollout/tool_timeout.py) to verl's agent-loop
metrics: `timing_s/agent_loop/tool_timeouts/{sum,max}` in the step's metrics (verl files its agent-loop counts there
too).
"""

from __future__ import annotations

import numpy as np
import ray
from verl.experimental.agent_loop.agent_loop import AgentLoopManager, AgentLoopWorker
from verl.protocol import DataProto

from recipes.rollout.tool_timeout import TOOL_TIMEOUTS
from recipes.tracing.flush import TraceFlusher
from recipes.tracing.guard import guard_trace_init
from recipes.tracing.relay_client import use_trace_relay


class TracedAgentLoopWorker(AgentLoopWorker):
    def __init__(self, *args, **kwargs):
        use_trace_relay(args[0] if args else kwargs.get("config"))  # verl passes the trainer config first
        guard_trace_init()
        self.trace_flusher = TraceFlusher()
        super().__init__(*args, **kwargs)

    async def generate_sequences(self, batch: DataProto) -> DataProto:
        output = await super().generate_sequences(batch)
        await self.trace_flusher.flush()
        return output


class TracedAgentLoopManager(AgentLoopManager):
    agent_loop_workers_class = ray.remote(TracedAgentLoopWorker)

    def _performance_metrics(self, metrics, output: DataProto) -> dict[str, float]:
        timing = super()._performance_metrics(metrics, output)
        timeouts = output.non_tensor_batch.get(TOOL_TIMEOUTS)
        if timeouts is not None and len(timeouts):
            timing[f"agent_loop/{TOOL_TIMEOUTS}/sum"] = float(np.sum(timeouts))
            timing[f"agent_loop/{TOOL_TIMEOUTS}/max"] = float(np.max(timeouts))
        return timing
