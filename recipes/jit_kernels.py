"""Compile, without a GPU, the CUDA kernels a 1-GPU (H100) run of the recipe compiles at first use, into the caches
the run reads: SGLang's JIT activation kernel (tvm-ffi, ~/.cache/tvm-ffi) and FlashInfer's attention modules
(~/.cache/flashinfer/<version>/90a/cached_ops).

What SGLang 0.5.12 asks for on an H100 with a Qwen2.5 model (bf16, no sliding window, no logit cap):
- SiLU-and-mul (sglang/srt/layers/activation.py forward_cuda -> sglang.jit_kernel.activation): built for the arch
  torch reports, 9.0 (sm_90, not 9.0a), with PDL on; the kernel is templated on dtype only, not on hidden size.
- FlashInfer (sglang/srt/layers/attention/flashinfer_backend.py): paged prefill with backend "fa2", decode with
  tensor cores (Qwen2.5's GQA groups are 6 to 8 >= 4) through the same fa2 prefill module, ragged prefill with
  backend "auto", which FlashInfer resolves to "fa3" on sm_90a; the plain decode module serves GQA groups < 4.
  FlashInfer builds for 9.0a on Hopper. Head dim 64 (Qwen2.5-0.5B) and 128 (1.5B, 3B, 7B, 14B, 32B).

    python -m recipes.jit_kernels [--head-dims 64 128]      # the env's CUDA_HOME and caches; one line per kernel
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

SGLANG_ARCH = (9, 0)         # torch.cuda.get_device_capability() on an H100
FLASHINFER_ARCH = "9.0a"     # FlashInfer adds the 'a' for sm_90 (flashinfer/compilation_context.py)
QWEN25_HEAD_DIMS = (64, 128)


def _timed(label: str, build) -> Path:
    start = time.monotonic()
    path = Path(build())
    print(f"[jit_kernels] {label}: {time.monotonic() - start:.0f} s -> {path} "
          f"({path.stat().st_size / 2**20:.1f} MiB)", flush=True)
    return path


def build_activation() -> Path:
    """SGLang's SiLU-and-mul for bf16, as the first MLP call on an H100 builds it; the .so it left in the cache."""
    import torch
    from sglang.jit_kernel import activation
    from sglang.jit_kernel.utils import override_jit_cuda_arch

    cache = Path(os.environ.get("TVM_FFI_CACHE_DIR", "~/.cache/tvm-ffi")).expanduser()
    before = set(cache.glob("sgl_kernel_jit_activation_*/*.so"))
    with override_jit_cuda_arch(*SGLANG_ARCH):
        try:
            activation._jit_activation_module(torch.bfloat16)
        except Exception as err:  # built, but loading may need a GPU driver; the build step raises RuntimeError
            built = set(cache.glob("sgl_kernel_jit_activation_*/*.so")) - before
            if not built and not any("bf16" in p.parent.name for p in before):
                raise
            print(f"[jit_kernels] activation built; not loadable here ({type(err).__name__}: "
                  f"{str(err).splitlines()[0][:120]})", flush=True)
    found = sorted(cache.glob("sgl_kernel_jit_activation_bf16*/*.so"), key=lambda p: p.stat().st_mtime)
    if not found:
        raise RuntimeError(f"no activation module in {cache} after the build")
    return found[-1]


def flashinfer_specs(head_dims) -> list:
    import torch
    from flashinfer.jit.attention.modules import gen_batch_decode_module, gen_batch_prefill_module

    specs = []
    for head_dim in head_dims:
        # q, kv, out dtypes, index dtype, qk and vo head dims, no rope in the kernel, no window, no soft cap
        shape = (torch.bfloat16, torch.bfloat16, torch.bfloat16, torch.int32, head_dim, head_dim, 0, False, False)
        specs.append((f"fa2 prefill+decode, head_dim {head_dim}", gen_batch_prefill_module("fa2", *shape, False)))
        specs.append((f"fa3 ragged prefill, head_dim {head_dim}", gen_batch_prefill_module("fa3", *shape, False)))
        specs.append((f"plain decode, head_dim {head_dim}", gen_batch_decode_module(*shape)))
    return specs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--head-dims", type=int, nargs="+", default=list(QWEN25_HEAD_DIMS))
    args = parser.parse_args(argv)
    os.environ.setdefault("FLASHINFER_CUDA_ARCH_LIST", FLASHINFER_ARCH)  # before flashinfer is imported
    print(f"[jit_kernels] CUDA_HOME={os.environ.get('CUDA_HOME', '(unset)')}", flush=True)
    start = time.monotonic()
    _timed("sglang activation (silu_and_mul, bf16, sm_90)", build_activation)
    for label, spec in flashinfer_specs(args.head_dims):
        _timed(f"flashinfer {label}, sm_90a", lambda spec=spec: (spec.build(verbose=False), spec.jit_library_path)[1])
    print(f"[jit_kernels] all compiled in {time.monotonic() - start:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
