"""Stand-in for verl's FSDP engine registration for GPUs (`FSDPEngineWithLMHead`, registered for devices cuda
and npu in verl/workers/engine/fsdp/transformer_impl.py): the same engine, registered for device "cpu".

One difference, forced by the hardware: verl builds a forward-only FSDP2 engine (the reference model) with
`CPUOffloadPolicy(pin_memory=True)`, and pinning host memory needs an accelerator. On the CPU the parameters
already live in host memory, so the forward-only engine is built the way the actor is, without that policy.
FSDP1 is not registered: it hard-codes `sync_module_states=True`, which refuses CPU parameters.
"""

from __future__ import annotations

from verl.workers.engine.base import EngineRegistry
from verl.workers.engine.fsdp.transformer_impl import FSDPEngineWithLMHead


@EngineRegistry.register(model_type="language_model", backend="fsdp2", device="cpu")
class CpuFSDP2EngineWithLMHead(FSDPEngineWithLMHead):
    def _build_fsdp_module(self, module):
        if not self.engine_config.forward_only:
            return super()._build_fsdp_module(module)
        # forward_only is read only to pick the offload policy while wrapping; restore it for everything after
        self.engine_config.forward_only = False
        try:
            return super()._build_fsdp_module(module)
        finally:
            self.engine_config.forward_only = True
