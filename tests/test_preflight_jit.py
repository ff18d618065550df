"""The launch preflight's four JIT lines (recipes/preflight/jit_toolchain.py): the CUDA compiler SGLang and
FlashInfer will pick and its version, the host compiler, SGLang's patched header, the kernel caches and the census
modules they lack. Stand-in nvcc and g++ scripts (labelled below) print what the real ones print; the lookups and
subprocesses are real, the caches are folders laid out as tvm-ffi and FlashInfer lay them out."""

import json

import pytest

from recipes.gpu_env.kernel_census import census
from recipes.preflight.findings import Report
from recipes.preflight.jit_toolchain import (
    FIRST_USE,
    check_jit_toolchain,
    compiler_line,
    cuda_home_in_use,
    flashinfer_cuda_norm,
    host_compiler_line,
    jit_cache_line,
    launch_census,
    needed_here,
    sglang_header_line,
)

pytestmark = pytest.mark.integration

NVCC_13 = "nvcc: NVIDIA (R) Cuda compiler driver\nCuda compilation tools, release 13.0, V13.0.88\n"
NVCC_12 = "nvcc: NVIDIA (R) Cuda compiler driver\nCuda compilation tools, release 12.8, V12.8.93\n"
PATCHED = "  using kernel_fn_t = decltype(&act_and_mul_kernel<T, ActivationKind::kSiLU, kUsePDL, false>);\n"
UNPATCHED = "  static auto select_kernel(const std::string& type)\n      -> decltype(activation_kernel<...>) {\n"


def _tool(path, stdout):
    """A stand-in executable that prints what the real tool prints for the version query."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\ncat <<'EOF'\n{stdout}EOF\n")
    path.chmod(0o755)
    return path


@pytest.fixture
def env_cuda(tmp_path):
    """A GPU env's CUDA home as the lock's wheels lay it out."""
    home = tmp_path / "venv" / "site-packages" / "nvidia" / "cu13"
    _tool(home / "bin" / "nvcc", NVCC_13)
    return home


def test_the_compiler_line_names_the_nvcc_and_its_version(env_cuda, tmp_path):
    ok, line = compiler_line({"CUDA_HOME": str(env_cuda), "PATH": "/usr/bin:/bin"})
    assert ok and line == f"CUDA compiler: {env_cuda}/bin/nvcc 13.0.88 (CUDA_HOME)"
    # without CUDA_HOME, as tvm-ffi and FlashInfer do: the nvcc on PATH decides the CUDA home
    ok, line = compiler_line({"PATH": f"{env_cuda / 'bin'}:/usr/bin:/bin"})
    assert ok and line.endswith("13.0.88 (nvcc on PATH)")


def test_no_compiler_is_an_error_saying_what_to_do(tmp_path):
    ok, line = compiler_line({"CUDA_HOME": str(tmp_path / "none"), "PATH": "/usr/bin:/bin"})
    assert not ok and line.startswith(f"CUDA compiler: {tmp_path}/none/bin/nvcc (CUDA_HOME) not found;")
    assert "bash scripts/install_gpu_env.sh" in line


def test_a_cuda_12_compiler_is_refused(tmp_path):
    home = tmp_path / "cuda-12.8"
    _tool(home / "bin" / "nvcc", NVCC_12)
    ok, line = compiler_line({"CUDA_PATH": str(home), "PATH": "/usr/bin:/bin"})
    assert not ok and "is CUDA 12.8, but torch and sglang-kernel are CUDA 13 builds" in line


def test_without_anything_they_fall_back_to_usr_local_cuda():
    assert cuda_home_in_use({"PATH": ""}) == (cuda_home_in_use({"PATH": ""})[0], "their default")
    assert str(cuda_home_in_use({"PATH": ""})[0]) == "/usr/local/cuda"


@pytest.mark.parametrize("version, ok", [("12.2.0", True), ("15.1.0", True), ("9.5.0", False), ("16.0.1", False)])
def test_the_host_compiler_must_be_a_gcc_nvcc_13_takes(tmp_path, version, ok):
    _tool(tmp_path / "bin" / "g++", version + "\n")
    got, line = host_compiler_line({"PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin"})
    assert got is ok
    assert f"gcc {version}" in line and "gcc/g++ 10 to 15" in line


def test_an_unpatched_sglang_activation_header_is_an_error(tmp_path):
    header = tmp_path / "sglang" / "jit_kernel" / "csrc" / "elementwise" / "activation.cuh"
    header.parent.mkdir(parents=True)
    header.write_text(UNPATCHED)
    ok, line = sglang_header_line(tmp_path / "sglang")
    assert not ok and "is unpatched and does not compile with nvcc 13.0" in line and "rerun bash scripts" in line
    header.write_text(PATCHED)
    assert sglang_header_line(tmp_path / "sglang") == (
        True, f"SGLang header: {header} patched for nvcc 13.0 (sgl-project/sglang#25487)")
    assert sglang_header_line(None) == (True, "SGLang header: sglang is not installed, no activation header to check")


def test_no_gxx_is_an_error(tmp_path):
    ok, line = host_compiler_line({"PATH": str(tmp_path)})
    assert not ok and "g++ not found on PATH" in line and "apt-get install g++" in line


QWEN_3B = "Qwen/Qwen2.5-3B-Instruct"


def _tvm_kernel(cache, name, sglang_dir, digest="0123456789abcdef"):
    """A tvm-ffi cache folder as SGLang's JIT leaves it: <name>_<16 hex>/ with the .so and the source that
    includes SGLang's header by absolute path."""
    folder = cache / f"{name}_{digest}"
    folder.mkdir(parents=True)
    (folder / f"{name}.so").write_bytes(b"")
    (folder / "cuda.cu").write_text(f'#include "{sglang_dir}/jit_kernel/csrc/elementwise/x.cuh"\n')


def _fi_module(folder, name):
    (folder / name).mkdir(parents=True)
    (folder / name / f"{name}.so").write_bytes(b"")


def test_the_cache_line_says_where_how_many_and_which_census_modules_are_missing(tmp_path):
    env = {"HOME": str(tmp_path)}
    line = jit_cache_line(env, "0.6.11.post1")
    assert line == (f"JIT caches: SGLang (tvm-ffi) {tmp_path}/.cache/tvm-ffi (0 kernels), FlashInfer "
                    f"{tmp_path}/.cache/flashinfer/0.6.11.post1/<arch>/cached_ops (0 kernels), no AOT modules; "
                    "first-use census for Qwen2.5-0.5B, Qwen2.5-1.5B, Qwen2.5-3B, Qwen2.5-7B: 0 of 14 built, missing "
                    f"{', '.join(m.key for m in census())}; {FIRST_USE}")


def test_prebuilt_flashinfer_modules_and_this_envs_sglang_kernels_count_as_built(tmp_path):
    sglang_dir, tvm = tmp_path / "env" / "sglang", tmp_path / "tvm"
    _tvm_kernel(tvm, "sgl_kernel_jit_fused_rope_true_128_true_bf16_t", sglang_dir)
    _tvm_kernel(tvm, "sgl_kernel_jit_kvcache_512_true", tmp_path / "elsewhere" / "sglang")  # another env's path
    _tvm_kernel(tvm, "sgl_kernel_jit_kvcache_5120_true", sglang_dir)  # another row size: not kvcache_512's
    jit = tmp_path / "ws" / ".cache" / "flashinfer" / "0.6.11.post1" / "90a" / "cached_ops"
    fa2 = next(m.name for m in census() if m.key == "fa2_hd128")
    _fi_module(jit, fa2)
    _fi_module(tmp_path / "aot", "cascade")  # flashinfer-jit-cache's folder
    env = {"HOME": str(tmp_path), "TVM_FFI_CACHE_DIR": str(tvm), "FLASHINFER_WORKSPACE_BASE": str(tmp_path / "ws")}
    line = jit_cache_line(env, "0.6.11.post1", launch_census(QWEN_3B), sglang_dir, (tmp_path / "aot",))
    assert line == (f"JIT caches: SGLang (tvm-ffi) {tvm} (3 kernels), FlashInfer "
                    f"{tmp_path}/ws/.cache/flashinfer/0.6.11.post1/<arch>/cached_ops (1 kernels), AOT "
                    f"{tmp_path}/aot (1 modules); first-use census for Qwen2.5-3B: 3 of 9 built, missing activation, "
                    f"kvcache_512, clamp_position, resolve_future_token_ids, fa3_hd128, norm; {FIRST_USE}")
    for module in launch_census(QWEN_3B):
        if module.library == "sglang":
            _tvm_kernel(tvm, module.name, sglang_dir, digest="fedcba9876543210")
        elif module.key in ("fa3_hd128", "norm"):
            _fi_module(jit, module.name)
    line = jit_cache_line(env, "0.6.11.post1", launch_census(QWEN_3B), sglang_dir, (tmp_path / "aot",))
    assert line.endswith("first-use census for Qwen2.5-3B: 9 of 9 built")


def test_the_census_follows_the_launchs_model(tmp_path):
    assert [m.key for m in launch_census(QWEN_3B)] == [
        "activation", "fused_rope_hd128", "kvcache_512", "clamp_position", "resolve_future_token_ids", "fa2_hd128",
        "fa3_hd128", "cascade", "norm"]
    folder = tmp_path / "export"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"hidden_size": 896, "num_attention_heads": 14,
                                                    "num_key_value_heads": 2}))
    modules = launch_census(str(folder))
    assert {m.key for m in modules} >= {"fused_rope_hd64", "kvcache_256", "fa2_hd64"}
    assert {m.models for m in modules} == {(str(folder),)}
    assert launch_census("someone/other-model") == census()  # unknown: the whole Qwen2.5 census


def test_flashinfers_cuda_norm_is_counted_only_where_flashinfer_would_compile_it():
    """With nvidia-cutlass-dsl (the lock's) FlashInfer runs CuTe DSL norm kernels and never compiles its CUDA norm
    module; without it (an image that trims it, as one made for an air-gapped node did) or with
    FLASHINFER_USE_CUDA_NORM=1 the first CUDA-graph capture compiles it."""
    modules = launch_census(QWEN_3B)
    assert "norm" not in {m.key for m in needed_here(modules, {}, cuda_norm=False)}
    assert [m.key for m in needed_here(modules, {}, cuda_norm=True)] == [m.key for m in modules]
    assert flashinfer_cuda_norm({"FLASHINFER_USE_CUDA_NORM": "1"})


def test_the_four_lines_go_into_the_report(env_cuda, tmp_path):
    _tool(tmp_path / "bin" / "g++", "12.2.0\n")
    report = Report()
    env = {"CUDA_HOME": str(env_cuda), "PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin", "HOME": str(tmp_path)}
    check_jit_toolchain(report, env, flashinfer_version="0.6.11.post1", model=QWEN_3B)
    assert report.errors == []
    assert [n.split(":")[0] for n in report.notes] == ["CUDA compiler", "host compiler", "SGLang header", "JIT caches"]
    built = 9 if flashinfer_cuda_norm(env) else 8  # FlashInfer's CUDA norm counts where FlashInfer would build it
    assert f"first-use census for Qwen2.5-3B: 0 of {built} built" in report.notes[-1]
    check_jit_toolchain(report, {**env, "CUDA_HOME": str(tmp_path / "none")}, flashinfer_version="0.6.11.post1")
    assert [e.split(":")[0] for e in report.errors] == ["CUDA compiler"]
