"""Which CUDA modules an H100 run of the recipe compiles with nvcc at first use: the census, as data.

Read from the installed sources of SGLang 0.5.12 and FlashInfer 0.6.11.post1 as verl 0.9.1's async server starts
them for a Qwen2.5 model (bf16, TP=1, attention backend flashinfer, CUDA graphs and SGLang's default piecewise
CUDA graph on, sampling at temperature 1 with top_p 1 and top_k -1); docs/first-use-kernels.md gives the file:line
of each trigger. recipes/jit_kernels.py builds exactly these modules, the launch preflight
(recipes/preflight/jit_toolchain.py) says which of them a node's caches lack. Nothing here imports sglang,
flashinfer or torch: the preflight and the CPU tests read it as it is.

Three parameters vary with the model: the head dim (RoPE and attention), and the bytes of one token's K (or V)
row in the KV cache, kv_heads x head_dim x 2 (bf16), which SGLang's KV-store kernel is templated on. GQA groups
(heads / kv_heads) of 4 or more make FlashInfer decode through the fa2 prefill module (tensor cores), so FlashInfer's
plain decode module is never built for Qwen2.5.
"""

from __future__ import annotations

from dataclasses import dataclass

# What the census was read from; a GPU env with other versions needs it read again (tests/gpu_env/census_check.py).
READ_FROM = {"sglang": "0.5.12", "flashinfer-python": "0.6.11.post1"}
# FlashInfer's cache folder for an H100/H200: it builds for 9.0a there (flashinfer/compilation_context.py).
FLASHINFER_ARCH_DIR = "90a"
BF16_BYTES = 2


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


# Qwen2.5 -Instruct and base models share these (num_attention_heads, num_key_value_heads, hidden_size / heads):
# 0.5B 896/14, 1.5B 1536/12, 3B 2048/16, 7B 3584/28. The recipe runs 0.5B (1gpu_smoke) and 3B (the default).
QWEN25 = (
    ModelShape("Qwen2.5-0.5B", heads=14, kv_heads=2, head_dim=64),
    ModelShape("Qwen2.5-1.5B", heads=12, kv_heads=2, head_dim=128),
    ModelShape("Qwen2.5-3B", heads=16, kv_heads=2, head_dim=128),
    ModelShape("Qwen2.5-7B", heads=28, kv_heads=4, head_dim=128),
)


@dataclass(frozen=True)
class Module:
    """One nvcc-built module. `name` is what the library calls it: for SGLang the tvm-ffi module name (its cache
    folder is `<name>_<16 hex digits>`), for FlashInfer the folder under cached_ops (or its AOT folder)."""

    key: str        # short and stable: what the build lines, the preflight and docs/measured.md call it
    kind: str       # which builder of recipes/jit_kernels.py makes it
    param: int      # the head dim or KV row bytes it is templated on (0: none)
    library: str    # "sglang" (tvm-ffi, ~/.cache/tvm-ffi) or "flashinfer" (~/.cache/flashinfer/<version>/90a)
    name: str
    what: str
    when: str
    models: tuple[str, ...] = ()


_FI_PREFILL = ("batch_prefill_with_kv_cache_dtype_q_bf16_dtype_kv_bf16_dtype_o_bf16_dtype_idx_i32_head_dim_qk_{d}_"
               "head_dim_vo_{d}_posenc_0_use_swa_False_use_logits_cap_False_f16qk_False")
SERVER_START = "server start"
OUTSIDE_GRAPH = ("an extend the piecewise CUDA graph does not take (more tokens than the graph's maximum, or a "
                 "logprob start inside the extend)")


def modules_for(shape: ModelShape) -> list[Module]:
    """The census for one model: five SGLang kernels and three FlashInfer modules."""
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
    ]


def census(shapes=QWEN25) -> list[Module]:
    """Every module the given models need, once each, with the models it serves (in the order first needed)."""
    found: dict[str, Module] = {}
    served: dict[str, list[str]] = {}
    for shape in shapes:
        for module in modules_for(shape):
            found.setdefault(module.key, module)
            served.setdefault(module.key, []).append(shape.name)
    return [Module(**{**m.__dict__, "models": tuple(served[m.key])}) for m in found.values()]


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
    base = model.rstrip("/").rsplit("/", 1)[-1].lower()
    for shape in QWEN25:
        if base == shape.name.lower() or base.startswith(shape.name.lower() + "-"):
            return shape
    return None
