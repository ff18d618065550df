"""The first-use kernel census (recipes/gpu_env/kernel_census.py) and what builds it (recipes/gpu_env/jit_kernels.py).

On CPU (CI): the census is pinned here module by module, so dropping one fails; jit_kernels builds exactly the
census, one line per module, and fails when one does not compile (its compiler replaced by the stand-in
builders below: nvcc and SGLang are not in the CPU env); the docs page cites every source line the census rests
on. With a GPU env on this machine (RECIPE_GPU_ENV, .venv-gpu, or check_gpu_kernels.sh's default), the census is
also checked against that env's installed sglang and flashinfer (tests/census_in_gpu_env.py); skipped without one.
"""

import os
import subprocess
from pathlib import Path

import pytest

from recipes.constants import REPO_ROOT
from recipes.gpu_env import jit_kernels
from recipes.gpu_env.kernel_census import QWEN25, SOURCES, census, modules_for, shape_of, shapes_with_head_dims

pytestmark = pytest.mark.integration

FA = ("batch_prefill_with_kv_cache_dtype_q_bf16_dtype_kv_bf16_dtype_o_bf16_dtype_idx_i32_head_dim_qk_{0}_"
      "head_dim_vo_{0}_posenc_0_use_swa_False_use_logits_cap_False_f16qk_False")
# What SGLang 0.5.12 and FlashInfer 0.6.11.post1 build for Qwen2.5 0.5B-7B on an H100 (docs/first-use-kernels.md)
PINNED = {
    "activation": ("sglang", "sgl_kernel_jit_activation_bf16_t_true"),
    "fused_rope_hd64": ("sglang", "sgl_kernel_jit_fused_rope_true_64_true_bf16_t"),
    "fused_rope_hd128": ("sglang", "sgl_kernel_jit_fused_rope_true_128_true_bf16_t"),
    "kvcache_256": ("sglang", "sgl_kernel_jit_kvcache_256_true"),
    "kvcache_512": ("sglang", "sgl_kernel_jit_kvcache_512_true"),
    "kvcache_1024": ("sglang", "sgl_kernel_jit_kvcache_1024_true"),
    "clamp_position": ("sglang", "sgl_kernel_jit_clamp_position_int64_t"),
    "resolve_future_token_ids": ("sglang", "sgl_kernel_jit_resolve_future_token_ids_int64_t"),
    "fa2_hd64": ("flashinfer", FA.format(64)),
    "fa2_hd128": ("flashinfer", FA.format(128)),
    "fa3_hd64": ("flashinfer", FA.format(64) + "_sm90"),
    "fa3_hd128": ("flashinfer", FA.format(128) + "_sm90"),
    "cascade": ("flashinfer", "cascade"),
    "norm": ("flashinfer", "norm"),  # where FlashInfer's CuTe DSL norm kernels do not import
}
DOCS = REPO_ROOT / "docs" / "first-use-kernels.md"


def test_the_census_is_every_pinned_module_once():
    assert {m.key: (m.library, m.name) for m in census()} == PINNED
    assert len(census()) == len(PINNED)


def test_row_sizes_and_head_dims_come_from_the_model_configs():
    rows = {s.name: (s.head_dim, s.kv_row_bytes, s.gqa_group) for s in QWEN25}
    assert rows == {"Qwen2.5-0.5B": (64, 256, 7), "Qwen2.5-1.5B": (128, 512, 6), "Qwen2.5-3B": (128, 512, 8),
                    "Qwen2.5-7B": (128, 1024, 7)}
    # every GQA group is >= 4: FlashInfer decodes through the fa2 prefill module, so no plain decode module
    assert all(s.gqa_group >= 4 for s in QWEN25)
    served = {m.key: m.models for m in census()}
    assert served["kvcache_1024"] == ("Qwen2.5-7B",) and served["fused_rope_hd64"] == ("Qwen2.5-0.5B",)
    assert served["fa2_hd128"] == ("Qwen2.5-1.5B", "Qwen2.5-3B", "Qwen2.5-7B")


def test_head_dims_pick_the_models():
    assert [s.name for s in shapes_with_head_dims([64])] == ["Qwen2.5-0.5B"]
    assert {m.key for m in census(shapes_with_head_dims([128]))} == set(PINNED) - {"fused_rope_hd64", "kvcache_256",
                                                                                    "fa2_hd64", "fa3_hd64"}
    with pytest.raises(ValueError, match="no Qwen2.5 model has head dim"):
        shapes_with_head_dims([96])


def test_a_launch_model_is_known_by_hub_id_or_config():
    assert shape_of("Qwen/Qwen2.5-3B-Instruct").name == "Qwen2.5-3B"
    assert shape_of("Qwen/Qwen2.5-32B-Instruct") is None  # not Qwen2.5-3B
    config = {"hidden_size": 896, "num_attention_heads": 14, "num_key_value_heads": 2}
    shape = shape_of("/ckpt/export", config)
    assert (shape.head_dim, shape.kv_row_bytes) == (64, 256)
    assert [m.key for m in modules_for(shape)] == ["activation", "fused_rope_hd64", "kvcache_256", "clamp_position",
                                                   "resolve_future_token_ids", "fa2_hd64", "fa3_hd64", "cascade",
                                                   "norm"]


def test_jit_kernels_lists_exactly_the_census(capsys):
    assert jit_kernels.main(["--list"]) == 0
    listed = [line.split("\t")[:3] for line in capsys.readouterr().out.splitlines()]
    assert {key: (library, name) for key, library, name in listed} == PINNED and len(listed) == len(PINNED)


class RecordingBuilders(dict):
    """Stand-in for the compilers (nvcc through SGLang's tvm-ffi and FlashInfer's ninja, absent on CPU): records
    which module each call got, writes a small file as the .so, and fails for the keys in `fail`."""

    def __init__(self, tmp_path, fail=()):
        self.built, self.fail, self.tmp_path = [], set(fail), tmp_path
        super().__init__(sglang=self.build, flashinfer=self.build)

    def build(self, module):
        self.built.append(module.key)
        if module.key in self.fail:
            raise RuntimeError(f"ninja: build stopped\nFAILED: cuda.cuda.o\n{module.name}.cuh(12): error: oops")
        path = self.tmp_path / f"{module.name}.so"
        path.write_bytes(b"\0" * 1024)
        return path


def test_build_all_builds_each_census_module_once_with_a_line_each(tmp_path, capsys):
    builders = RecordingBuilders(tmp_path)
    seconds, failed = jit_kernels.build_all(census(), builders)
    assert builders.built == [m.key for m in census()] and failed == [] and list(seconds) == builders.built
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == len(PINNED)
    assert lines[0].startswith("[jit_kernels] activation: 0 s (SGLang SiLU-and-mul, bf16, PDL; Qwen2.5-0.5B, ")
    assert "kvcache_1024: 0 s (SGLang KV-cache store, 1024-byte rows (4 KV heads x 128 x 2 B); Qwen2.5-7B;" in lines[-1]


def test_a_module_that_does_not_compile_fails_the_build_and_the_others_still_build(tmp_path, capsys, monkeypatch):
    builders = RecordingBuilders(tmp_path, fail={"fused_rope_hd128"})
    monkeypatch.setattr(jit_kernels, "BUILDERS", builders)
    monkeypatch.setattr(jit_kernels, "check_triton", lambda: ["Triton ptxas: (stand-in)"])
    assert jit_kernels.main([]) == 1
    out, err = capsys.readouterr()
    assert builders.built == [m.key for m in census()]
    assert "[jit_kernels] FAILED fused_rope_hd128 after 0 s (SGLang RoPE, neox, rotary dim 128" in out
    assert "RuntimeError: sgl_kernel_jit_fused_rope_true_128_true_bf16_t.cuh(12): error: oops" in out  # its error
    assert "1 of 14 did not compile or check: fused_rope_hd128" in err and "RESULT" not in out


def test_a_passing_build_ends_with_a_result_line_for_the_measured_page(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(jit_kernels, "BUILDERS", RecordingBuilders(tmp_path))
    monkeypatch.setattr(jit_kernels, "check_triton", lambda: ["Triton ptxas: (stand-in)"])
    assert jit_kernels.main(["--head-dims", "64"]) == 0
    result = capsys.readouterr().out.strip().splitlines()[-1].split()
    assert result[0] == "RESULT" and [r.split("=")[0] for r in result[1:]] == [
        *(f"gpu_kernel_{m.key}_seconds" for m in census(shapes_with_head_dims([64]))),
        "gpu_kernel_compile_total_seconds"]


def test_warm_builds_target_what_sglangs_server_builds_on_an_h100_and_name_what_a_launch_must_share(
        tmp_path, capsys, monkeypatch):
    """SGLang's model runner sets FLASHINFER_CUDA_ARCH_LIST to 9.0a on an H100 whatever it was, so a warm build for
    another list would fill a cache folder the node never reads; variables that enter a build command are named,
    since a launch without them rebuilds."""
    monkeypatch.setattr(jit_kernels, "BUILDERS", RecordingBuilders(tmp_path))
    monkeypatch.setattr(jit_kernels, "check_triton", lambda: ["Triton ptxas: (stand-in)"])
    monkeypatch.setenv("FLASHINFER_CUDA_ARCH_LIST", "8.0 9.0a")
    monkeypatch.setenv("FLASHINFER_JIT_LINEINFO", "1")
    monkeypatch.delenv("CUDA_HOME", raising=False)
    assert jit_kernels.main(["--head-dims", "64", "--only", "norm", "activation"]) == 0
    out = capsys.readouterr().out
    assert os.environ["FLASHINFER_CUDA_ARCH_LIST"] == "9.0a" and "FLASHINFER_CUDA_ARCH_LIST=8.0 9.0a ignored" in out
    assert "built with FLASHINFER_JIT_LINEINFO=1: a launch reuses these modules only with the same values" in out
    assert [line.split(":")[0] for line in out.splitlines() if line.endswith("MiB)")] == [
        "[jit_kernels] activation", "[jit_kernels] norm"]  # --only, in census order
    assert out.splitlines()[-1] == "RESULT gpu_kernel_activation_seconds=0 gpu_kernel_norm_seconds=0"  # no total
    monkeypatch.delenv("FLASHINFER_JIT_LINEINFO")
    assert jit_kernels.build_settings(os.environ) == "no build variable set"
    with pytest.raises(SystemExit):
        jit_kernels.main(["--head-dims", "64", "--only", "fa2_hd128"])  # not a head-dim-64 module


def test_the_docs_page_names_every_module_and_cites_every_source_line():
    text = DOCS.read_text()
    assert [key for key in PINNED if f"`{key}`" not in text] == []
    assert [str(s) for sources in SOURCES.values() for s in sources if f"{s}" not in text] == []


def _gpu_env() -> Path | None:
    named = os.environ.get("RECIPE_GPU_ENV")
    for env in ([Path(named)] if named else [REPO_ROOT / ".venv-gpu", Path("/tmp/gsm8k-gpu-check/env")]):
        if (env / "bin" / "python").is_file() and list(env.glob("lib/python3*/site-packages/sglang/jit_kernel")):
            return env
    return None


def test_the_census_matches_the_installed_gpu_env():
    env = _gpu_env()
    if env is None:
        pytest.skip("no GPU env here (RECIPE_GPU_ENV, .venv-gpu, /tmp/gsm8k-gpu-check/env): "
                    "CHECK_DRIVER=0 bash scripts/install_gpu_env.sh builds one")
    proc = subprocess.run([str(env / "bin" / "python"), str(REPO_ROOT / "tests" / "census_in_gpu_env.py")],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(REPO_ROOT), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0 and proc.stdout.strip().endswith("census ok"), proc.stdout + proc.stderr[-3000:]
