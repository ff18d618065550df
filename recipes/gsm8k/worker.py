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
A trajectory that raises outside the agent loop's own `run` (verl's trace wrapper of it, the worker's
post-processing) ends with the prompt alone, scored 0 (recipes/gsm8k/failures.py), instead of failing the step.
The manager adds the tool calls that ran past their bound (recipes/gsm8k/tool_timeout.py) and the trajectories that
ended in an error to verl's agent-loop metrics: `timing_s/agent_loop/{tool_timeouts,trajectory_errors}/{sum,max}`
in the step's metrics (verl files its agent-loop counts there too), and names the errors in one console line.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging

import numpy as np
import ray
from omegaconf import OmegaConf
from verl.experimental.agent_loop.agent_loop import AgentLoopManager, AgentLoopWorker
from verl.protocol import DataProto

from recipes.gsm8k.agent_loop import REWARD_EXTRA_INFO
from recipes.gsm8k.failures import ERROR_REASON, TRAJECTORY_ERRORS, log_failure, prompt_only_output
from recipes.gsm8k.score import RewardFunctionError, score_trajectory
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
        try:
            return await self._run_traced(sampling_params, trajectory, agent_name=agent_name, trace=trace, **kwargs)
        except RewardFunctionError:
            raise
        except Exception as err:  # this trajectory only: the step goes on
            reason = log_failure(err, "around the agent loop")
            return await self._ended(trajectory, reason, kwargs)

    async def _ended(self, trajectory: dict, reason: str, kwargs: dict):
        """The prompt alone, scored 0 with every reward extra key the configured reward gives (its verdict on no
        text), as verl's post-processing pads any trajectory."""
        output = prompt_only_output(self.tokenizer, kwargs["raw_prompt"], self.rollout_config)
        _, extra, _ = await score_trajectory(self.config, kwargs, output.extra_fields, output.num_turns, "")
        extra.update({"score": 0.0} if "score" in extra else {})
        extra.update({TOOL_TIMEOUTS: 0, TRAJECTORY_ERRORS: 1, ERROR_REASON: reason})
        output.reward_score = 0.0
        output.extra_fields[REWARD_EXTRA_INFO] = extra
        return await self._agent_loop_postprocess(output, trajectory["validate"], **kwargs)

    async def _run_traced(self, sampling_params, trajectory, *, agent_name, trace, **kwargs):
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
        """verl's agent-loop timings of the step, with the recipe's counts; the step's errors named (verl calls this
        once per generate_sequences, with the whole step's batch)."""
        timing = super()._performance_metrics(metrics, output)
        for key in (TOOL_TIMEOUTS, TRAJECTORY_ERRORS):
            counts = output.non_tensor_batch.get(key)
            if counts is not None and len(counts):
                timing[f"agent_loop/{key}/sum"] = float(np.sum(counts))
                timing[f"agent_loop/{key}/max"] = float(np.max(counts))
        report_errors(output.non_tensor_batch.get(ERROR_REASON), len(output))
        return timing


def report_errors(reasons, trajectories: int) -> None:
    """One console line for a step with trajectories that ended in an error, their reasons counted; a step whose
    every trajectory did fails, with them."""
    reasons = [str(r) for r in (reasons if reasons is not None else ()) if r]
    if not reasons:
        return
    counted = collections.Counter(reasons).most_common()
    named = "; ".join(f"{reason} (x{count})" for reason, count in counted[:5])
    more = f"; and {len(counted) - 5} other reasons" if len(counted) > 5 else ""
    if len(reasons) == trajectories:
        raise RuntimeError(f"every trajectory of this step ({trajectories}) ended in an error, so nothing could be "
                           f"learned from it: {named}{more}. This is the setup's (the tokenizer, the rollout server, "
                           "a tool), not the policy's: see the workers' first traceback of each")
    logger.warning("%d of %d trajectories of this step ended in an error and score 0: %s%s", len(reasons),
                   trajectories, named, more)
