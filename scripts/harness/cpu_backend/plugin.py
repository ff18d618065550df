"""The module `VERL_USE_EXTERNAL_MODULES` names, so that `import verl` imports it in EVERY process of the run
(driver, trainer ranks, agent-loop and reward workers, rollout servers): registrations made in the driver alone
are not seen in Ray workers. It registers, under verl's own extension points:

- the CPU platform (harness.cpu_backend.platform), chosen with `VERL_PLATFORM=cpu`;
- the CPU rollout backend "hf_cpu" (harness.cpu_backend.rollout) in both of verl's rollout registries: the replica
  registry the trainer's driver reads, and the rollout-class table the training ranks read. The latter is a
  plain dict with no registration API in verl 0.9.1 (verl/workers/rollout/base.py).

The FSDP2 engine for device "cpu" and the early gloo process group are per training rank:
harness.cpu_backend.worker_setup, named by `actor_rollout_ref.model.external_lib`.
"""

from __future__ import annotations

from verl.workers.rollout import base as rollout_base
from verl.workers.rollout.replica import RolloutReplicaRegistry

import harness.cpu_backend.platform  # noqa: F401  (registers the platform)
from harness.cpu_backend import ROLLOUT_NAME


def _load_replica():
    from harness.cpu_backend.rollout import CpuRolloutReplica

    return CpuRolloutReplica


RolloutReplicaRegistry.register(ROLLOUT_NAME, _load_replica)
rollout_base._ROLLOUT_REGISTRY[(ROLLOUT_NAME, "async")] = "harness.cpu_backend.rollout.CpuRolloutAdapter"
