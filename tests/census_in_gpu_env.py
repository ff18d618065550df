"""Checks recipes/gpu_env/kernel_census.py against a GPU env's installed sglang, flashinfer and verl, building nothing.

Run by that env's Python (tests/test_kernel_census.py finds one and runs this; not collected by pytest itself):

    RECIPE_GPU_ENV=/path/to/env python -m pytest tests/test_kernel_census.py
    /path/to/env/bin/python tests/census_in_gpu_env.py

Checks: the versions the census was read from; every file:line it cites still holds its text; the module names
the installed libraries give each census module (through recipes/gpu_env/jit_kernels.py's own builders, with the compile
step replaced by a recorder); every SGLang JIT kernel the files on the server's path for Qwen2.5 import is
either built by the census or not run there, for a reason said below; and the preflight counts FlashInfer's CUDA
norm module exactly where FlashInfer falls back to it. One line per problem; `census ok` last if
none, exit 1 otherwise.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from importlib import metadata
from pathlib import Path

from recipes.gpu_env import jit_kernels
from recipes.gpu_env.kernel_census import QWEN25, READ_FROM, SOURCES, census

# The sglang files a Qwen2.5 server (flashinfer attention, TP=1) runs through, under sglang/srt/.
ON_PATH = ("models/qwen2.py", "layers/activation.py", "layers/layernorm.py", "layers/rotary_embedding/base.py",
           "layers/attention/flashinfer_backend.py", "layers/attention/utils.py", "layers/sampler.py",
           "layers/logits_processor.py", "mem_cache/memory_pool.py", "mem_cache/common.py",
           "model_executor/forward_batch_info.py", "model_executor/model_runner.py",
           "model_executor/cuda_graph_runner.py", "model_executor/piecewise_cuda_graph_runner.py",
           "managers/scheduler.py", "managers/overlap_utils.py", "managers/schedule_batch.py")
# sglang.jit_kernel.<module> -> the census kind that builds it
BUILT = {"activation": "activation", "rope": "fused_rope", "kvcache": "kvcache", "clamp_position": "clamp_position",
         "resolve_future_token_ids": "resolve_future_token_ids"}
NOT_RUN = {
    "rmsnorm_hf": "only with server_args.rl_on_policy_target, which verl 0.9.1 does not set",
    "ngram_embedding": "only for models with n-gram embeddings",
    "utils": "helpers (arch, PDL), no kernel",
}


def main() -> int:
    problems = []
    for dist, version in READ_FROM.items():
        if metadata.version(dist) != version:
            problems.append(f"{dist} {metadata.version(dist)} is installed; the census was read from {version}")
    site = Path(importlib.util.find_spec("sglang").origin).parents[1]
    for topic, sources in SOURCES.items():
        for source in sources:
            lines = (site / source.path).read_text().splitlines()
            if source.line > len(lines) or source.text not in lines[source.line - 1]:
                problems.append(f"{topic}: {source} no longer holds {source.text!r}")
    problems += _names()
    problems += _imports(site / "sglang" / "srt")
    problems += _norm_fallback()
    for problem in problems:
        print(problem)
    print("census ok" if not problems else f"{len(problems)} problem(s)")
    return 1 if problems else 0


def _names() -> list[str]:
    """Each census module as the installed library names it: SGLang's through its own JIT entry point with the
    compile replaced by a recorder, FlashInfer's from its JitSpec."""
    import tvm_ffi.cpp

    tvm_ffi.cpp.build_inline = lambda name, **kwargs: f"/recorded/{name}.so"
    problems = []
    for module in census(QWEN25):
        try:
            if module.library == "sglang":
                jit_kernels.build_sglang(module)  # raises when SGLang names it otherwise
            elif (name := jit_kernels._flashinfer_spec(module).name) != module.name:
                problems.append(f"{module.key}: FlashInfer names it {name}, the census {module.name}")
        except RuntimeError as err:
            problems.append(f"{module.key}: {err}")
    return problems


def _norm_fallback() -> list[str]:
    """The preflight counts FlashInfer's CUDA norm module exactly where FlashInfer falls back to it."""
    import os

    import flashinfer.norm

    from recipes.preflight.jit_toolchain import flashinfer_cuda_norm

    if flashinfer.norm._USE_CUDA_NORM != flashinfer_cuda_norm(os.environ):
        return [f"flashinfer.norm uses its CUDA module: {flashinfer.norm._USE_CUDA_NORM}; the preflight's "
                f"flashinfer_cuda_norm says {flashinfer_cuda_norm(os.environ)}"]
    return []


def _imports(srt: Path) -> list[str]:
    problems, seen = [], set()
    for relative in ON_PATH:
        for name in sorted(set(re.findall(r"from sglang\.jit_kernel\.(\w+) import", (srt / relative).read_text()))):
            seen.add(name)
            if name not in BUILT and name not in NOT_RUN:
                problems.append(f"sglang/srt/{relative} imports sglang.jit_kernel.{name}, which the census neither "
                                "builds nor says why not")
    kinds = {m.kind for m in census(QWEN25)}
    for name, kind in BUILT.items():
        if name not in seen:
            problems.append(f"no file on the path imports sglang.jit_kernel.{name} any more (census kind {kind})")
        if kind not in kinds:
            problems.append(f"sglang.jit_kernel.{name} runs but the census builds no {kind} module")
    return problems


if __name__ == "__main__":
    sys.exit(main())
