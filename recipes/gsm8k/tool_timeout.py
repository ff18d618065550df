"""A tool call that never returns costs one trajectory, not the step.

verl 0.9.1 awaits a tool with no time limit: `ToolAgentLoop._call_tool` awaits `tool.execute(...)`
(verl/experimental/agent_loop/tool_agent_loop.py:487), the turn awaits all of its calls (`asyncio.gather`, :321), the
agent-loop worker awaits every trajectory of its share of the batch (agent_loop.py:654), the manager every worker
(agent_loop.py:1248) and the trainer the manager: one call that never answers holds the whole step, forever, with
every GPU idle. verl has no tool timeout to set (its `rollout.server.timeout` is the SGLang server's HTTP timeout).

`BoundedToolCalls`, mixed into the recipe's agent loop (recipes/gsm8k/agent_loop.py), bounds each call by
`actor_rollout_ref.rollout.custom.tool_timeout_s` (config/gsm8k_multiturn_grpo.yaml; null: no bound, as verl). A
call past it is abandoned (cancelled, never awaited again: a tool that ignores the cancel cannot hold the loop
either) and answered with an error the model sees; the trajectory ends after that turn and is scored 0; the count,
TOOL_TIMEOUTS, is one of the trajectory's reward extra keys (rollout and validation dumps, verl's validation
metrics) and the agent-loop manager sums it into the step's metrics (recipes/gsm8k/worker.py). A tool whose work
is CPU-bound runs it in a work process (tools/process_pool.py, as the calculator does): the cancel kills that
process. A tool that blocks the event loop itself (a synchronous call inside `async def execute`) cannot be bounded
from inside the loop: the launcher's progress watchdog (recipes/watchdog/) catches that one.
"""

from __future__ import annotations

import asyncio
import logging

from verl.experimental.agent_loop.tool_agent_loop import AgentState
from verl.tools.schemas import ToolResponse

logger = logging.getLogger(__name__)

TOOL_TIMEOUTS = "tool_timeouts"  # reward extra key: calls of this trajectory that ran past the bound


def tool_timeout_s(config) -> float | None:
    """The bound on one tool call, from the trainer config; None: unbounded."""
    custom = config.actor_rollout_ref.rollout.get("custom") or {}
    value = custom.get("tool_timeout_s")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise ValueError(f"actor_rollout_ref.rollout.custom.tool_timeout_s must be a positive number of seconds or "
                         f"null (no bound), not {value!r}")
    return float(value)


def timeout_message(tool_name: str, limit_s: float) -> str:
    return f"Error: the tool '{tool_name}' did not answer within {limit_s:g} s."


class BoundedToolCalls:
    """For a ToolAgentLoop subclass (one instance per trajectory): each tool call bounded in time."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.tool_timeout_s = tool_timeout_s(self.config)
        self.tool_timeouts = 0

    async def _call_tool(self, tool_call, tools_kwargs, agent_data):
        call = asyncio.ensure_future(super()._call_tool(tool_call, tools_kwargs, agent_data))
        if self.tool_timeout_s is None:
            return await call
        done, _ = await asyncio.wait({call}, timeout=self.tool_timeout_s)
        if done:
            return call.result()
        call.cancel()
        call.add_done_callback(_forget)
        self.tool_timeouts += 1
        logger.warning("Tool %r did not answer within %g s: answered with an error; this trajectory ends and scores 0",
                       tool_call.name, self.tool_timeout_s)
        return ToolResponse(text=timeout_message(tool_call.name, self.tool_timeout_s)), 0.0, {}

    async def _handle_processing_tools_state(self, agent_data) -> AgentState:
        state = await super()._handle_processing_tools_state(agent_data)
        return AgentState.TERMINATED if self.tool_timeouts else state


def _forget(task: asyncio.Future) -> None:
    """An abandoned call's end, whenever it comes: its outcome is read so asyncio does not log it as lost."""
    if not task.cancelled():
        task.exception()
