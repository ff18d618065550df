"""Which CUDA modules an H100 run of the recipe compiles with nvcc at first use: the census, as data.

Read from the installed sources of SGLang 0.5.12 and FlashInfer 0.6.11.post1 as verl 0.9.1's async server starts
them for a Qwen2.5 model (bf16, TP=1, attention backend flashinfer, CUDA graphs and SGLang's default piecewise
CUDA graph on, sampling at temperature 1 with top_p 1 and top_k -1); docs/first-use-kernels.md gives the file:line
of each trigger. recipes/gpu_env/jit_kernels.py builds exactly these modules, the launch preflight
(recipes/preflight/jit_toolchain.py) says which of them a node's caches lack. Nothing here imports sglang,
flashinfer or torch: the preflight and the CPU tests read it as it is.

Three parameters vary with the model: the head dim (RoPE and attention), and the bytes of one token's K (or V)
row in the KV cache, kv_heads x head_dim x 2 (bf16), which SGLang's KV-store kernel is templated on. GQA groups
(heads / kv_heads) of 4 or more make FlashInfer decode through the fa2 prefill module (tensor cores), so FlashInfer's
plain decode module is never built for Qwen2.5.

One module depends on the env rather than the model: FlashInfer's CUDA `norm` (RMSNorm) is compiled only where its
CuTe DSL norm kernels do not import (nvidia-cutlass-dsl absent, as in an image that trims it) or
FLASHINFER_USE_CUDA_NORM=1; with the lock's nvidia-cutlass-dsl the same calls run CuTe DSL kernels instead (`only_if`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from recipes.models import BF16_BYTES, QWEN25_CONFIGS, ModelSize, table_entry

# What the census was read from; a GPU env with other versions needs it read again (tests/gpu_env/census_check.py).
READ_FROM = {"sglang": "0.5.12", "flashinfer-python": "0.6.11.post1"}
# FlashInfer's cache folder for an H100/H200: it builds for 9.0a there (flashinfer/compilation_context.py).
FLASHINFER_ARCH_DIR = "90a"
# Module.only_if: FlashInfer falls back to its CUDA norm module (flashinfer/norm/__init__.py:71)
CUDA_NORM = "FlashInfer's CuTe DSL norm kernels do not import (no nvidia-cutlass-dsl) or FLASHINFER_USE_CUDA_NORM=1"


@dataclass(frozen=True)
class ModelShape:
    """The attention shape of a model, from its config.json (head_dim = hidden_size / num_attention_heads)."""

    name: str
    heads: int
    kv_heads: int
    head_dim: int

    @property
    def gqa_group(self) -> int:
        return self.heads // self.kv_heads

    @property
    def kv_row_bytes(self) -> int:
        """One token's K (or V) row of one layer in SGLang's bf16 KV cache, at TP=1."""
        return self.kv_heads * self.head_dim * BF16_BYTES


# The Qwen2.5 sizes (recipes/models.py, their one home) as attention shapes. The recipe runs 0.5B (1gpu_smoke) and
# 3B (the default).
QWEN25 = tuple(ModelShape(name, heads=size.heads, kv_heads=size.kv_heads, head_dim=size.head_dim)
               for name, size in ((n, ModelSize.from_config(n, c)) for n, c in QWEN25_CONFIGS.items()))


@dataclass(frozen=True)
class Module:
    """One nvcc-built module. `name` is what the library calls it: for SGLang the tvm-ffi module name (its cache
    folder is `<name>_<16 hex digits>`), for FlashInfer the folder under cached_ops (or its AOT folder)."""

    key: str        # short and stable: what the build lines, the preflight and docs/measured.md call it
    kind: str       # which builder of recipes/gpu_env/jit_kernels.py makes it
    param: int      # the head dim or KV row bytes it is templated on (0: none)
    library: str    # "sglang" (tvm-ffi, ~/.cache/tvm-ffi) or "flashinfer" (~/.cache/flashinfer/<version>/90a)
    name: str
    what: str
    when: str
    models: tuple[str, ...] = ()
    only_if: str = ""  # "": wherever the model runs; else the condition under which it is compiled (CUDA_NORM)


_FI_PREFILL = ("batch_prefill_with_kv_cache_dtype_q_bf16_dtype_kv_bf16_dtype_o_bf16_dtype_idx_i32_head_dim_qk_{d}_"
               "head_dim_vo_{d}_posenc_0_use_swa_False_use_logits_cap_False_f16qk_False")
SERVER_START = "server start"
OUTSIDE_GRAPH = ("an extend the piecewise CUDA graph does not take (more tokens than the graph's maximum, or a "
                 "logprob start inside the extend)")


def modules_for(shape: ModelShape) -> list[Module]:
    """The census for one model: five SGLang kernels and four FlashInfer modules (`norm` only where CUDA_NORM)."""
    d, row = shape.head_dim, shape.kv_row_bytes
    return [
        Module("activation", "activation", 0, "sglang", "sgl_kernel_jit_activation_bf16_t_true",
               "SGLang SiLU-and-mul, bf16, PDL", SERVER_START),
        Module(f"fused_rope_hd{d}", "fused_rope", d, "sglang", f"sgl_kernel_jit_fused_rope_true_{d}_true_bf16_t",
               f"SGLang RoPE, neox, rotary dim {d}, bf16", SERVER_START),
        Module(f"kvcache_{row}", "kvcache", row, "sglang", f"sgl_kernel_jit_kvcache_{row}_true",
               f"SGLang KV-cache store, {row}-byte rows ({shape.kv_heads} KV heads x {d} x 2 B)", SERVER_START),
        Module("clamp_position", "clamp_position", 0, "sglang", "sgl_kernel_jit_clamp_position_int64_t",
               "SGLang decode positions, int64", "the first decode batch"),
        Module("resolve_future_token_ids", "resolve_future_token_ids", 0, "sglang",
               "sgl_kernel_jit_resolve_future_token_ids_int64_t",
               "SGLang overlap scheduler's future token ids, int64", "the first batch"),
        Module(f"fa2_hd{d}", "fa2", d, "flashinfer", _FI_PREFILL.format(d=d),
               f"FlashInfer paged prefill and tensor-core decode, fa2, head dim {d}", SERVER_START),
        Module(f"fa3_hd{d}", "fa3", d, "flashinfer", _FI_PREFILL.format(d=d) + "_sm90",
               f"FlashInfer ragged prefill, fa3, head dim {d}", OUTSIDE_GRAPH),
        Module("cascade", "cascade", 0, "flashinfer", "cascade",
               "FlashInfer merge_state (ragged + paged halves of an extend with a cached prefix)", OUTSIDE_GRAPH),
        Module("norm", "norm", 0, "flashinfer", "norm", "FlashInfer RMSNorm and fused add + RMSNorm, CUDA, bf16",
               "the first CUDA-graph capture", only_if=CUDA_NORM),
    ]


def census(shapes=QWEN25) -> list[Module]:
    """Every module the given models need, once each, with the models it serves (in the order first needed)."""
    found: dict[str, Module] = {}
    served: dict[str, list[str]] = {}
    for shape in shapes:
        for module in modules_for(shape):
            found.setdefault(module.key, module)
            served.setdefault(module.key, []).append(shape.name)
    return [replace(m, models=tuple(served[m.key])) for m in found.values()]


def shapes_with_head_dims(head_dims) -> list[ModelShape]:
    """The census models whose head dim is one of `head_dims` (64: 0.5B; 128: 1.5B, 3B, 7B)."""
    wanted = set(head_dims)
    unknown = wanted - {s.head_dim for s in QWEN25}
    if unknown:
        raise ValueError(f"no Qwen2.5 model has head dim {sorted(unknown)}; they have "
                         f"{sorted({s.head_dim for s in QWEN25})}")
    return [s for s in QWEN25 if s.head_dim in wanted]


def shape_of(model: str, config: dict | None = None) -> ModelShape | None:
    """The shape of the model a launch names: from its config.json when there is one, else a Qwen2.5 hub id
    (Qwen/Qwen2.5-3B-Instruct); None when neither says."""
    if config and all(k in config for k in ("hidden_size", "num_attention_heads")):
        heads = int(config["num_attention_heads"])
        head_dim = int(config.get("head_dim") or int(config["hidden_size"]) // heads)
        return ModelShape(model, heads, int(config.get("num_key_value_heads") or heads), head_dim)
    entry = table_entry(model)
    return next((shape for shape in QWEN25 if entry and shape.name == entry[0]), None)


@dataclass(frozen=True)
class Source:
    """A line of the installed packages (path under site-packages) the census rests on, and text it holds."""

    path: str
    line: int
    text: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}"


# Why each module is built, and the facts around them, as read in the installed sources (file:line). The docs page
# cites every one (tests/test_kernel_census.py); tests/census_in_gpu_env.py checks each line still holds its text.
SOURCES: dict[str, tuple[Source, ...]] = {
    "activation": (
        Source("sglang/srt/models/qwen2.py", 92, "self.act_fn = SiluAndMul()"),
        Source("sglang/srt/layers/activation.py", 94, "silu_and_mul(x, out)"),
        Source("sglang/jit_kernel/activation.py", 33, "args = make_cpp_args(dtype, is_arch_support_pdl())"),
    ),
    "fused_rope": (
        Source("sglang/srt/layers/rotary_embedding/base.py", 76, "self.head_size not in [64, 128, 256, 512]"),
        Source("sglang/srt/layers/rotary_embedding/base.py", 350, "apply_rope_with_cos_sin_cache_inplace("),
        Source("sglang/jit_kernel/rope.py", 31, "make_cpp_args(is_neox, rope_dim, is_arch_support_pdl(), dtype)"),
    ),
    "kvcache": (
        Source("sglang/srt/mem_cache/memory_pool.py", 847, "self.row_dim = self.head_num * self.head_dim"),
        Source("sglang/srt/mem_cache/memory_pool.py", 104, "can_use_store_cache(row_bytes)"),
        Source("sglang/jit_kernel/kvcache.py", 22, "args = make_cpp_args(row_bytes, is_arch_support_pdl())"),
    ),
    "clamp_position": (
        Source("sglang/srt/model_executor/forward_batch_info.py", 559, "clamp_position(batch.seq_lens)"),
        Source("sglang/srt/model_executor/forward_batch_info.py", 1221, "clamp_position = clamp_position_cuda"),
        Source("sglang/srt/managers/schedule_batch.py", 1628, "torch.tensor(seq_lens, dtype=torch.int64"),
    ),
    "resolve_future_token_ids": (
        Source("sglang/srt/managers/scheduler.py", 3038, "self.future_map.resolve_future(model_worker_batch)"),
        Source("sglang/srt/managers/overlap_utils.py", 132, "_resolve_future_token_ids(model_worker_batch.input_ids"),
        Source("sglang/srt/managers/schedule_batch.py", 1626, "sum(input_ids, []), dtype=torch.int64"),
    ),
    "fa2": (
        Source("verl/workers/rollout/sglang_rollout/async_sglang_server.py", 295, 'attention_backend = "flashinfer"'),
        Source("sglang/srt/layers/attention/flashinfer_backend.py", 126, 'self.prefill_backend = "fa2"'),
        Source("sglang/srt/layers/attention/flashinfer_backend.py", 1705, "return gqa_group_size >= 4"),
        Source("flashinfer/decode.py", 1078, "self._cached_module = get_batch_prefill_module("),
        Source("flashinfer/prefill.py", 2027, "self._cached_module = get_batch_prefill_module("),
    ),
    "fa3": (
        Source("sglang/srt/layers/attention/flashinfer_backend.py", 243, 'fmha_backend = "auto"'),
        Source("sglang/srt/layers/attention/flashinfer_backend.py", 495, "and not is_in_piecewise_cuda_graph()"),
        Source("flashinfer/utils.py", 516, 'return "fa3"'),
    ),
    "cascade": (
        Source("sglang/srt/layers/attention/flashinfer_backend.py", 884, "o, _ = merge_state(o1, s1, o2, s2)"),
        Source("flashinfer/cascade.py", 37, "return gen_cascade_module().build_and_load()"),
    ),
    "norm": (
        Source("sglang/srt/models/qwen2.py", 235, "self.input_layernorm = RMSNorm("),
        Source("sglang/srt/layers/layernorm.py", 259, "fused_add_rmsnorm(x, residual, self.weight.data"),
        Source("sglang/srt/layers/layernorm.py", 261, "out = rmsnorm(x, self.weight.data, self.variance_epsilon)"),
        Source("sgl_kernel/elementwise.py", 120, "return _flashinfer_norm.rmsnorm(input, weight, eps, out"),
        Source("sgl_kernel/elementwise.py", 160, "_flashinfer_norm.fused_add_rmsnorm(input, residual, weight, eps"),
        Source("flashinfer/norm/__init__.py", 71, "_USE_CUDA_NORM = True"),
        Source("flashinfer/norm/__init__.py", 159, "get_norm_module().rmsnorm(out, input, weight, eps, enable_pdl)"),
        Source("flashinfer/norm/__init__.py", 81, "return gen_norm_module().build_and_load()"),
    ),
    "piecewise_graph": (
        Source("sglang/srt/server_args.py", 737, "disable_piecewise_cuda_graph: bool = False"),
        Source("sglang/srt/server_args.py", 1519, "piecewise_cuda_graph_max_tokens = self.chunked_prefill_size"),
        Source("sglang/srt/model_executor/piecewise_cuda_graph_runner.py", 483, "num_tokens <= self.max_num_tokens"),
        Source("sglang/srt/model_executor/piecewise_cuda_graph_runner.py", 481, "start_len < seq_len"),
        Source("sglang/srt/managers/schedule_batch.py", 1336, "logprob_start_len = len(self.fill_ids)"),
        Source("sglang/srt/model_executor/piecewise_cuda_graph_runner.py", 820, "with enable_piecewise_cuda_graph():"),
    ),
    "not_built": (
        Source("sglang/srt/models/qwen2.py", 319, "if get_global_server_args().rl_on_policy_target is not None"),
        Source("sglang/srt/model_executor/model_runner.py", 2900, "if ngram_embedding_info is None:"),
        Source("sglang/srt/layers/sampler.py", 129, "simple_sampling_case = ("),
        Source("sglang/srt/model_executor/model_runner.py", 2525, "if backend_str not in ["),
    ),
    "warm_cache": (  # what a build command holds, so what a warmed module must share with the node's first call
        Source("sglang/jit_kernel/utils.py", 256, "major, minor = 0, 0"),
        Source("sglang/jit_kernel/utils.py", 267, "os.environ[env_key] = get_jit_cuda_arch().target_name"),
        Source("sglang/jit_kernel/utils.py", 283, "get_jit_cuda_arch().jit_flag,"),
        Source("sglang/jit_kernel/utils.py", 312, "return get_jit_cuda_arch().major >= 9"),
        Source("tvm_ffi/cpp/extension.py", 163, 'if "TVM_FFI_CUDA_ARCH_LIST" in os.environ:'),
        Source("tvm_ffi/cpp/extension.py", 379, 'default_cuda_cflags = ["-std=c++17", "-O2"]'),
        Source("tvm_ffi/cpp/extension.py", 420, 'ninja.append("nvcc = {}".format(str(Path(_find_cuda_home())'),
        Source("tvm_ffi/cpp/extension.py", 670, '_maybe_write(str(build_dir / "build.ninja"), ninja_source)'),
        Source("sglang/srt/model_executor/model_runner.py", 1391, "set_cuda_arch()"),
        Source("sglang/srt/utils/common.py", 2646, 'os.environ["FLASHINFER_CUDA_ARCH_LIST"] = ('),
        Source("flashinfer/jit/core.py", 283, "write_if_different(ninja_path, content)"),
        Source("flashinfer/jit/core.py", 415, 'debug_env = os.environ.get("FLASHINFER_JIT_DEBUG")'),
        Source("flashinfer/jit/core.py", 458, 'if os.environ.get("FLASHINFER_JIT_LINEINFO", "0") == "1":'),
        Source("flashinfer/jit/cpp_ext.py", 127, 'sysconfig.get_path("include"),'),
    ),
    "tvm_ffi_cache_key": (
        Source("sglang/jit_kernel/utils.py", 205, "cuda_sources = [f'#include \"{path}\"' for path in cuda_files]"),
        Source("tvm_ffi/cpp/extension.py", 863, 'build_dir = Path(cache_dir).expanduser() / f"{name}_{source_hash}"'),
    ),
    "triton": (
        Source("sglang/srt/layers/attention/flashinfer_backend.py", 1129, "create_flashinfer_kv_indices_triton[(bs,)]"),
        Source("sglang/srt/mem_cache/common.py", 124, "write_req_to_token_pool_triton[("),
        Source("sglang/srt/model_executor/forward_batch_info.py", 1156, "compute_position_kernel[(batch_size,)]("),
        Source("triton/knobs.py", 198, 'os.path.dirname(__file__), "backends", "nvidia", "bin"'),
    ),
}
