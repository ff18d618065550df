"""Faults that stall a real run, injected by a test into the recipe's own extension points (nothing is patched in
verl). Each stands for a real way a run hangs; the test picks one with STALL_FAULT (the workers inherit it):

- a tool whose call never returns, awaiting forever (`NeverAnsweringCalculator`, in a tool YAML): what the recipe's
  per-call bound (recipes/gsm8k/tool_timeout.py) turns into one lost trajectory;
- a tool that blocks its agent-loop worker's event loop (`LoopBlockingCalculator`): a synchronous call inside
  `async def execute`, which no bound inside the loop can end; STALL_FAULT=tool;
- a reward function that blocks (`compute_score`, as reward.custom_reward_function.path): the recipe's reward,
  except that the first training trajectory's call sleeps; STALL_FAULT=reward;
- a training rank that sleeps inside the update (this module as actor_rollout_ref.model.external_lib, which
  verl imports in each rank before it builds its engine; it sets up the CPU rank as
  scripts/harness/cpu_backend/worker_setup does): rank 0 sleeps before its first training forward-backward, the
  other rank waits for it in a collective;
  STALL_FAULT=update.
STALL_FAULT_HOLD_S bounds the sleep (unset: for good), so the same faults also make a step slow on purpose;
STALL_FAULT_ARMED=<file>: a fault fires only once that file exists (the test creates it when the run is where it
wants the fault, e.g. after step 1).
"""

from __future__ import annotations

import asyncio
import os
import threading
import time

import harness.cpu_backend.worker_setup  # noqa: F401  a CPU training rank's process group and engine, first
from recipes.gsm8k.reward import compute_score as _recipe_score
from tools.calculator import CalculatorTool

FAULT_ENV, HOLD_ENV, ARMED_ENV = "STALL_FAULT", "STALL_FAULT_HOLD_S", "STALL_FAULT_ARMED"
FOREVER_S = 10**7
_once = threading.Lock()  # the first faulty call of a process holds it for good: later calls pass


def hold_s() -> float:
    return float(os.environ.get(HOLD_ENV) or FOREVER_S)


def _first(fault: str) -> bool:
    """True exactly once per process, when `fault` is the one chosen (and armed)."""
    armed = os.environ.get(ARMED_ENV)
    if os.environ.get(FAULT_ENV) != fault or (armed and not os.path.exists(armed)):
        return False
    return _once.acquire(blocking=False)


class NeverAnsweringCalculator(CalculatorTool):
    async def execute(self, instance_id, parameters, **kwargs):
        await asyncio.Event().wait()


class LoopBlockingCalculator(CalculatorTool):
    async def execute(self, instance_id, parameters, **kwargs):
        if _first("tool"):
            time.sleep(hold_s())  # the event loop itself stops here: no other trajectory of this worker moves
        return await super().execute(instance_id, parameters, **kwargs)


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs) -> dict:
    if (extra_info or {}).get("split") == "train" and _first("reward"):
        time.sleep(hold_s())
    return _recipe_score(data_source, solution_str, ground_truth, extra_info, **kwargs)


def _sleep_in_rank_zero() -> None:
    if os.environ.get(FAULT_ENV) != "update" or os.environ.get("RANK") != "0":
        return
    from harness.cpu_backend.engine import CpuFSDP2EngineWithLMHead

    training = CpuFSDP2EngineWithLMHead.forward_backward_batch

    def forward_backward_batch(self, data, loss_function, forward_only=False):
        if not forward_only and _first("update"):
            time.sleep(hold_s())  # rank 0, inside the update; rank 1 is in its forward, waiting for this one
        return training(self, data, loss_function, forward_only)

    CpuFSDP2EngineWithLMHead.forward_backward_batch = forward_backward_batch


_sleep_in_rank_zero()
