"""The module `VERL_USE_EXTERNAL_MODULES` names, so that `import verl` imports it in EVERY process of the run
(driver, trainer ranks, agent-loop and reward workers, rollout servers): registrations made in the driver alone
are not seen in Ray workers. It registers, under verl's own extension points:

- the CPU platform (testkit.cpu_verl.platform), chosen with `VERL_PLATFORM=cpu`;
- the CPU rollout backend "hf_cpu" (testkit.cpu_verl.rollout) in both of verl's rollout registries: the replica
  registry the trainer's driver reads, and the rollout-class table the training ranks read. The latter is a
  plain dict with no registration API in verl 0.9.1 (verl/workers/rollout/base.py).

- in the agent-loop worker CPU_SMOKE_UNTRACED_AGENT_LOOP_WORKER names, a weave pointed at a closed port
  (testkit.cpu_verl.trace_fault: the smoke's failing-weave.init variant).

The FSDP2 engine for device "cpu" and the early gloo process group are per training rank:
testkit.cpu_verl.worker_setup, named by `actor_rollout_ref.model.external_lib`.
"""

from __future__ import annotations

from verl.workers.rollout import base as rollout_base
from verl.workers.rollout.replica import RolloutReplicaRegistry

import testkit.cpu_verl.platform  # noqa: F401  (registers the platform)
from testkit.cpu_verl import ROLLOUT_NAME
from testkit.cpu_verl.trace_fault import break_weave_in_this_worker


def _load_replica():
    from testkit.cpu_verl.rollout import CpuRolloutReplica

    return CpuRolloutReplica


RolloutReplicaRegistry.register(ROLLOUT_NAME, _load_replica)
rollout_base._ROLLOUT_REGISTRY[(ROLLOUT_NAME, "async")] = "testkit.cpu_verl.rollout.CpuRolloutAdapter"
break_weave_in_this_worker()
