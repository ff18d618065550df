"""Imported in each training worker before it builds its engines (`actor_rollout_ref.model.external_lib`, which
verl's HFModelConfig imports first thing in `init_model`). Stands in for nothing; it does what verl's own
process-group setup cannot do on a CPU:

- verl initialises the process group with backend "cpu:gloo,<device>:<backend>", which for device "cpu" reads
  "cpu:gloo,cpu:gloo" and torch refuses (duplicate device type). A worker-group rank (RANK, WORLD_SIZE and
  MASTER_ADDR/PORT set by verl's RayWorkerGroup) gets a plain gloo group here first; verl then keeps it.
- registers the CPU FSDP2 engine (harness.cpu_backend.engine) in that rank.

Other processes that build an HFModelConfig (rollout servers, agent-loop workers) import this module too:
they are no worker-group rank, and nothing happens there.
"""

from __future__ import annotations

import os

import torch.distributed as dist

_RANK_ENV = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def init_gloo_process_group() -> bool:
    """A gloo default process group for this worker-group rank; False where this process is no such rank."""
    if dist.is_initialized():
        return True
    if not all(os.environ.get(key) for key in _RANK_ENV):
        return False
    dist.init_process_group(backend="gloo", rank=int(os.environ["RANK"]), world_size=int(os.environ["WORLD_SIZE"]),
                            init_method=os.environ.get("DIST_INIT_METHOD"))
    return True


if init_gloo_process_group():
    import harness.cpu_backend.engine  # noqa: F401  (registers the engine)
