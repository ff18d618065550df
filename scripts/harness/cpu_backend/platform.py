"""Stand-in for verl's CUDA platform (`verl.plugin.platform.platform_cuda.PlatformCUDA`) on a machine with no GPU.

verl 0.9.1 asks its platform plugin for the device name, the torch device module, the collective backend and
the Ray resource that places one training rank. Registered as platform "cpu" and chosen with
`VERL_PLATFORM=cpu`, this answers: device "cpu", backend gloo, and Ray's logical "GPU" resource as one CPU rank
(verl's resource pools count only GPU/NPU resources, so the smoke profile gives Ray as many logical GPUs as
ranks; Ray then sets CUDA_VISIBLE_DEVICES in the workers, which CPU torch ignores).
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any

import psutil
import torch
from verl.plugin.platform import PlatformBase, PlatformRegistry

PLATFORM_NAME = "cpu"


class CpuDeviceModule:
    """What verl calls on `torch.cuda` through `get_torch_device()`, answered for the CPU.

    `is_available()` is False on purpose: verl then skips its accelerator-memory bookkeeping (empty_cache
    loops, memory fractions, accelerator RNG state in checkpoints) instead of calling into CUDA.
    """

    def __getattr__(self, name: str) -> Any:  # Stream, stream, current_stream, synchronize, Event, ...
        return getattr(torch.cpu, name)

    def is_available(self) -> bool:
        return False

    def current_device(self) -> str:
        return "cpu"  # verl passes it to .to(...) and torch.device(...)

    def device_count(self) -> int:
        return 1

    def set_device(self, device: Any) -> None:
        pass

    def get_device_name(self, device: Any = None) -> str:
        return "cpu"

    def manual_seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    manual_seed_all = manual_seed

    def get_rng_state(self) -> torch.Tensor:
        return torch.get_rng_state()

    def set_rng_state(self, state: torch.Tensor) -> None:
        torch.set_rng_state(state)

    def mem_get_info(self, device: Any = None) -> tuple[int, int]:
        memory = psutil.virtual_memory()
        return memory.available, memory.total

    def memory_allocated(self, device: Any = None) -> int:
        return 0  # no accelerator memory to account for

    memory_reserved = max_memory_allocated = max_memory_reserved = memory_allocated

    def empty_cache(self) -> None:
        pass

    def ipc_collect(self) -> None:
        pass

    def reset_peak_memory_stats(self, device: Any = None) -> None:
        pass

    reset_accumulated_memory_stats = reset_peak_memory_stats

    def set_per_process_memory_fraction(self, fraction: float, device: Any = None) -> None:
        pass


CPU_DEVICE = CpuDeviceModule()


@PlatformRegistry.register(platform=PLATFORM_NAME)
class CpuPlatform(PlatformBase):
    @property
    def device_name(self) -> str:
        return "cpu"

    @property
    def vendor_name(self) -> str:
        return "cpu"

    @property
    def device_module(self) -> CpuDeviceModule:
        return CPU_DEVICE

    def is_available(self) -> bool:
        return True

    def current_device(self) -> str:
        return CPU_DEVICE.current_device()

    def device_count(self) -> int:
        return CPU_DEVICE.device_count()

    def set_device(self, device_index: int) -> None:
        pass

    def synchronize(self, device_index: int | None = None) -> None:
        pass

    def manual_seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    def manual_seed_all(self, seed: int) -> None:
        torch.manual_seed(seed)

    def set_allocator_settings(self, settings: str) -> None:
        pass

    def empty_cache(self) -> None:
        pass

    def get_device_capability(self, device_index: int = 0) -> tuple[None, None]:
        return None, None

    def communication_backend_name(self) -> str:
        return "gloo"

    def visible_devices_envvar(self) -> str:
        return "CUDA_VISIBLE_DEVICES"  # what Ray sets for the logical GPUs; CPU torch ignores it

    @contextmanager
    def nvtx_range(self, msg: str):
        yield

    def profiler_start(self) -> None:
        pass

    def profiler_stop(self) -> None:
        pass

    def ray_resource_name(self) -> str:
        return "GPU"  # one logical Ray GPU per CPU rank: verl's resource pools count GPUs only

    def ray_noset_envvars(self) -> list[str]:
        return []

    def is_ipc_supported(self) -> bool:
        return False

    def cudart(self) -> None:
        return None
