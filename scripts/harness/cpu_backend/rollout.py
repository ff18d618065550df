"""Stand-in for verl's SGLang rollout backend (`SGLangReplica` and the trainer-side `ServerAdapter`) on the CPU:
verl 0.9.1 ships no rollout that runs without a GPU (SGLang has no CPU backend; HFRollout is sync-only dead code).

Registered as rollout "hf_cpu" (harness.cpu_backend.plugin) and selected with `actor_rollout_ref.rollout.name=hf_cpu`.
Two halves, as in verl:
- `CpuRolloutReplica` (in the trainer's driver): starts one `CpuRolloutServer` Ray actor per replica, the actor
  verl's agent loop sends its generate calls to, plus the run's shared steering ledger.
- `CpuRolloutAdapter` (in each training rank, built by verl's ActorRolloutRefWorker): receives the actor's
  weights after each update. Every rank consumes the whole weight generator (FSDP2 gathers each full tensor
  collectively); the first rank of each replica sends the state dict to its server.
Only the colocated ("hybrid") mode is implemented: the trainer ranks and the replicas share the machine.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

import ray
import torch
from verl.workers.rollout.base import BaseRollout
from verl.workers.rollout.replica import RolloutMode, RolloutReplica

from harness.cpu_backend import ROLLOUT_NAME
from harness.cpu_backend.server import CpuRolloutServer
from harness.cpu_backend.steering import LEDGER_NAME, SteeringLedger

# Steer the first of every N first turns of a prompt (harness.cpu_backend.steering); 0 turns steering off.
# Set with actor_rollout_ref.rollout.engine_kwargs.hf_cpu.steer_every.
DEFAULT_STEER_EVERY = 0


def server_name(replica_rank: int, suffix: str = "") -> str:
    return f"cpu_rollout_server_{replica_rank}{suffix}"


def _replica_world_size(config) -> int:
    return config.tensor_model_parallel_size * config.data_parallel_size * config.pipeline_model_parallel_size


class CpuRolloutReplica(RolloutReplica):
    def rollout_worker_use_gpu(self) -> bool:
        return False

    async def launch_servers(self) -> None:
        if self.rollout_mode != RolloutMode.HYBRID:
            raise NotImplementedError(f"rollout {ROLLOUT_NAME} runs colocated with the trainer only (hybrid mode), "
                                      f"not {self.rollout_mode}")
        steer_every = int((self.config.engine_kwargs.get(ROLLOUT_NAME) or {}).get("steer_every", DEFAULT_STEER_EVERY))
        ledger = None
        if steer_every:
            ledger = ray.remote(SteeringLedger).options(name=LEDGER_NAME, get_if_exists=True, num_cpus=0).remote(
                steer_every)
        server = ray.remote(CpuRolloutServer).options(
            name=server_name(self.replica_rank, self.name_suffix), num_cpus=0, max_concurrency=self.max_concurrency,
        ).remote(config=self.config, model_config=self.model_config, replica_rank=self.replica_rank, steering=ledger)
        self.servers = [server]
        self._server_handle = server
        self._server_address = await server.get_server_address.remote()


class CpuRolloutAdapter(BaseRollout):
    def __init__(self, config, model_config, device_mesh, replica_rank: int = -1, **kwargs) -> None:
        super().__init__(config, model_config, device_mesh)
        rank, world = int(os.environ["RANK"]), _replica_world_size(self.config)
        self.replica_rank = rank // world if replica_rank == -1 else replica_rank
        self.sends_weights = rank % world == 0  # one sender per replica, as SGLang's TP-rank-0 adapter
        self._server = None

    async def resume(self, tags: list[str]) -> None:
        pass  # weights and KV cache never leave host memory

    async def release(self) -> None:
        pass

    async def update_weights(self, weights: Iterable[tuple[str, torch.Tensor]], wire_format: str = "named_tensors",
                             global_steps: int | None = None, **kwargs) -> None:
        if wire_format != "named_tensors":
            raise NotImplementedError(f"rollout {ROLLOUT_NAME} takes full named tensors, not {wire_format!r}")
        if kwargs.get("peft_config") is not None:
            raise NotImplementedError(f"rollout {ROLLOUT_NAME} takes merged weights: set model.lora.merge=True")
        state_dict = {}
        for name, tensor in weights:  # every rank: each full tensor is gathered collectively
            if self.sends_weights:
                state_dict[name] = tensor.detach().to("cpu", copy=True)
        if self.sends_weights:
            if self._server is None:
                self._server = ray.get_actor(server_name(self.replica_rank))
            await self._server.load_weights.remote(state_dict, global_steps)
