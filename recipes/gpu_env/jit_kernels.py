"""Compile, without a GPU, every CUDA module an H100 run of the recipe compiles with nvcc at first use
(recipes/gpu_env/kernel_census.py lists them), into the caches the run reads: SGLang's JIT kernels (tvm-ffi,
~/.cache/tvm-ffi or TVM_FFI_CACHE_DIR) and FlashInfer's modules (~/.cache/flashinfer/<version>/90a/cached_ops,
under FLASHINFER_WORKSPACE_BASE if set). One line per module with its time and the models it serves; exit 1 if
any does not compile (the others are still built).

How SGLang 0.5.12 + FlashInfer 0.6.11 use them for Qwen2.5 on an H100 (docs/first-use-kernels.md has file:line):
- SGLang's tvm-ffi kernels are built for the arch torch reports, 9.0 (not 9.0a), with PDL on: SiLU-and-mul and
  RoPE (per head dim) and the KV-cache store (per KV row size) as the server starts and captures its CUDA graphs;
  decode positions (clamp_position) at the first decode batch; the overlap scheduler's future token ids at the
  first batch.
- FlashInfer builds for 9.0a. Prefill and decode both run its fa2 batch-prefill module: SGLang's piecewise CUDA
  graph (on by default) runs a normal prefill through the paged wrapper (fa2), and decode uses tensor cores for
  Qwen2.5's GQA groups (6 to 8, >= 4), which FlashInfer serves with the same fa2 module. The ragged wrapper
  ("auto", resolved to fa3 on sm_90a) and merge_state (the cascade module) run only for an extend the piecewise
  graph does not take. The plain decode module would serve GQA groups < 4: no Qwen2.5 model has one.
- FlashInfer's CUDA norm module (SGLang's RMSNorm calls FlashInfer's through sgl_kernel) is compiled at the first
  CUDA-graph capture where FlashInfer's CuTe DSL norm kernels do not import; built here wherever, for such nodes.
- Three Triton kernels run too (FlashInfer's KV indices, req-to-token writes, extend positions); Triton compiles
  them with its own ptxas, not nvcc: this checks they import and that ptxas is the env's.

tvm-ffi names a kernel's cache folder by a hash of its sources, which `#include` SGLang's headers by absolute path:
kernels built here are reused only by an env at the same path (FlashInfer's cache has no such hash).

    python -m recipes.gpu_env.jit_kernels [--head-dims 64 128]   # the env's CUDA_HOME and caches
    python -m recipes.gpu_env.jit_kernels --list                 # the modules it would build, building nothing
    python -m recipes.gpu_env.jit_kernels --only norm activation # some of them
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

from recipes.gpu_env.kernel_census import QWEN25, Module, census, shapes_with_head_dims

SGLANG_ARCH = (9, 0)         # torch.cuda.get_device_capability() on an H100
# What SGLang's model runner sets on an H100 whatever the environment said (sglang/srt/utils/common.py:2646), and
# what FlashInfer derives from the GPU (flashinfer/compilation_context.py): the cache folder 90a and its targets.
FLASHINFER_ARCH = "9.0a"
# Variables that change a module's build command (tvm-ffi's and FlashInfer's build.ninja, or nvcc itself): ninja
# rebuilds a warmed module when the launch's value differs from the one it was built with.
BUILD_VARIABLES = ("CUDA_HOME", "CXX", "NVCC_PREPEND_FLAGS", "NVCC_APPEND_FLAGS", "FLASHINFER_NVCC",
                   "FLASHINFER_JIT_DEBUG", "FLASHINFER_JIT_VERBOSE", "FLASHINFER_JIT_LINEINFO",
                   "FLASHINFER_NVCC_THREADS", "FLASHINFER_EXTRA_CFLAGS", "FLASHINFER_EXTRA_CUDAFLAGS",
                   "FLASHINFER_EXTRA_LDFLAGS")
# The Triton kernels SGLang launches on this path: (module, function).
TRITON_KERNELS = (
    ("sglang.srt.layers.attention.utils", "create_flashinfer_kv_indices_triton"),
    ("sglang.srt.mem_cache.common", "write_req_to_token_pool_triton"),
    ("sglang.srt.model_executor.forward_batch_info", "compute_position_kernel"),
)


@contextmanager
def _build_without_loading(names: list[str]):
    """SGLang's load_jit calls tvm_ffi.cpp.load_inline (compile, then load the .so, which needs a GPU driver);
    inside this it only compiles, returns the .so path and records the module name SGLang gave it."""
    import tvm_ffi.cpp

    def build_only(name, *, keep_module_alive=True, **kwargs):  # noqa: ARG001 - load_inline's signature
        names.append(name)
        return tvm_ffi.cpp.build_inline(name, **kwargs)

    original = tvm_ffi.cpp.load_inline
    tvm_ffi.cpp.load_inline = build_only
    try:
        yield
    finally:
        tvm_ffi.cpp.load_inline = original


def _sglang_call(module: Module) -> Callable[[], object]:
    import torch
    from sglang.jit_kernel import activation, clamp_position, kvcache, resolve_future_token_ids, rope

    return {
        "activation": lambda: activation._jit_activation_module(torch.bfloat16),
        "fused_rope": lambda: rope._jit_fused_rope_module(True, module.param, torch.bfloat16),
        "kvcache": lambda: kvcache._jit_kvcache_module(module.param),
        "clamp_position": lambda: clamp_position._jit_clamp_position_module(torch.int64),
        "resolve_future_token_ids": lambda: resolve_future_token_ids._jit_resolve_future_token_ids_module(
            torch.int64),
    }[module.kind]


def build_sglang(module: Module) -> Path:
    """One SGLang kernel, through SGLang's own JIT entry point, as the server's first call builds it."""
    from sglang.jit_kernel.utils import override_jit_cuda_arch

    names: list[str] = []
    with override_jit_cuda_arch(*SGLANG_ARCH), _build_without_loading(names):
        path = Path(_sglang_call(module)())
    if names != [module.name]:
        raise RuntimeError(f"SGLang named the module {names}, the census {module.name!r}: the installed sglang "
                           "differs from the one recipes/gpu_env/kernel_census.py was read from")
    return path


def _flashinfer_spec(module: Module):
    os.environ["FLASHINFER_CUDA_ARCH_LIST"] = FLASHINFER_ARCH  # read when flashinfer is first imported
    import torch
    from flashinfer.jit.attention.modules import gen_batch_prefill_module
    from flashinfer.jit.cascade import gen_cascade_module
    from flashinfer.jit.norm import gen_norm_module

    if module.kind == "cascade":
        return gen_cascade_module()
    if module.kind == "norm":
        return gen_norm_module()
    # q, kv, out dtypes, index dtype, qk and vo head dims, no rope in the kernel, no window, no soft cap, no fp16 qk
    return gen_batch_prefill_module(module.kind, torch.bfloat16, torch.bfloat16, torch.bfloat16, torch.int32,
                                    module.param, module.param, 0, False, False, False)


def build_flashinfer(module: Module) -> Path:
    spec = _flashinfer_spec(module)
    if spec.name != module.name:
        raise RuntimeError(f"FlashInfer names the module {spec.name!r}, the census {module.name!r}: the installed "
                           "flashinfer differs from the one recipes/gpu_env/kernel_census.py was read from")
    spec.build(verbose=False)
    return Path(spec.jit_library_path)


BUILDERS: dict[str, Callable[[Module], Path]] = {"sglang": build_sglang, "flashinfer": build_flashinfer}


def build_settings(environ) -> str:
    """The variables a launch must share with this build to reuse its modules (docs/first-use-kernels.md)."""
    found = [f"{name}={environ[name]}" for name in BUILD_VARIABLES if environ.get(name)]
    return (f"built with {', '.join(found)}: a launch reuses these modules only with the same values (and this env "
            "at this path)") if found else "no build variable set"


def describe(module: Module) -> str:
    where = f", where {module.only_if}" if module.only_if else ""
    return f"{module.what}; {', '.join(module.models)}; built at {module.when}{where}"


def _first_line(err: BaseException) -> str:
    lines = [line for line in str(err).splitlines() if line.strip()]
    errors = [line for line in lines if re.search(r"\berror\b", line, re.I)]
    return f"{type(err).__name__}: {(errors or lines or [''])[0].strip()[:300]}"


def build_all(modules: list[Module], builders=None) -> tuple[dict[str, float], list[str]]:
    """Builds each module, printing one line each; returns ({key: seconds} of those built, [keys that failed])."""
    builders = builders or BUILDERS
    seconds, failed = {}, []
    for module in modules:
        start = time.monotonic()
        try:
            path = builders[module.library](module)
        except Exception as err:
            failed.append(module.key)
            print(f"[jit_kernels] FAILED {module.key} after {time.monotonic() - start:.0f} s ({describe(module)}): "
                  f"{_first_line(err)}", flush=True)
            continue
        seconds[module.key] = time.monotonic() - start
        size = path.stat().st_size / 2**20 if path.is_file() else 0.0
        print(f"[jit_kernels] {module.key}: {seconds[module.key]:.0f} s ({describe(module)}) -> {path} "
              f"({size:.1f} MiB)", flush=True)
    return seconds, failed


def check_triton() -> list[str]:
    """The Triton kernels import and Triton's ptxas is the env's own (sys.prefix); one line each."""
    import importlib

    from triton import knobs

    ptxas = knobs.nvidia.ptxas  # raises RuntimeError when there is none that runs
    inside = Path(sys.prefix).resolve() in Path(ptxas.path).resolve().parents
    if not inside:
        raise RuntimeError(f"Triton's ptxas is {ptxas.path}, outside this env ({sys.prefix}); unset "
                           "TRITON_PTXAS_PATH")
    lines = [f"Triton ptxas: {ptxas.path} (CUDA {ptxas.version}, the env's own)"]
    for module_name, function in TRITON_KERNELS:
        getattr(importlib.import_module(module_name), function)
        lines.append(f"Triton kernel {function} ({module_name}) imports")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--head-dims", type=int, nargs="+", default=sorted({s.head_dim for s in QWEN25}),
                        help="build for the Qwen2.5 models with these head dims (64: 0.5B; 128: 1.5B, 3B, 7B)")
    parser.add_argument("--only", nargs="+", metavar="KEY", help="build only these census modules (--list names them)")
    parser.add_argument("--list", action="store_true", help="print the modules it would build and exit")
    args = parser.parse_args(argv)
    try:
        modules = census(shapes_with_head_dims(args.head_dims))
    except ValueError as err:
        parser.error(str(err))
    if args.only:
        unknown = sorted(set(args.only) - {m.key for m in modules})
        if unknown:
            parser.error(f"--only {' '.join(unknown)}: not in the census for head dims "
                         f"{' '.join(map(str, args.head_dims))} ({', '.join(m.key for m in modules)})")
        modules = [m for m in modules if m.key in args.only]
    if args.list:
        for module in modules:
            print(f"{module.key}\t{module.library}\t{module.name}\t{describe(module)}")
        return 0
    asked = os.environ.get("FLASHINFER_CUDA_ARCH_LIST")
    if asked not in (None, FLASHINFER_ARCH):
        print(f"[jit_kernels] FLASHINFER_CUDA_ARCH_LIST={asked} ignored: SGLang's server on an H100 builds for "
              f"{FLASHINFER_ARCH} whatever it says", flush=True)
    os.environ["FLASHINFER_CUDA_ARCH_LIST"] = FLASHINFER_ARCH  # before anything imports flashinfer
    print(f"[jit_kernels] {len(modules)} modules for head dims {' '.join(map(str, args.head_dims))}, sm_90 (H100, "
          f"H200); {build_settings(os.environ)}", flush=True)
    start = time.monotonic()
    seconds, failed = build_all(modules)
    total = time.monotonic() - start
    try:
        triton_lines = check_triton()
    except Exception as err:
        failed.append("triton")
        triton_lines = [f"FAILED triton: {_first_line(err)}"]
    for line in triton_lines:
        print(f"[jit_kernels] {line}", flush=True)
    if failed:
        print(f"[jit_kernels] {len(failed)} of {len(modules)} did not compile or check: {', '.join(failed)} (the "
              "first error of each is above)", file=sys.stderr, flush=True)
        return 1
    print(f"[jit_kernels] all {len(modules)} modules compiled in {total:.0f} s", flush=True)
    whole = "" if args.only else f" gpu_kernel_compile_total_seconds={total:.0f}"  # the census's total, not a part's
    print("RESULT " + " ".join(f"gpu_kernel_{key}_seconds={value:.0f}" for key, value in seconds.items()) + whole,
          flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
