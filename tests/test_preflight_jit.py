"""The launch preflight's three JIT lines (recipes/preflight/jit_toolchain.py): the CUDA compiler SGLang and
FlashInfer will pick and its version, the host compiler, the kernel caches. Stand-in nvcc and g++ scripts (labelled
below) print what the real ones print; the lookups and subprocesses are real."""

import pytest

from recipes.preflight.jit_toolchain import (
    FIRST_USE,
    check_jit_toolchain,
    compiler_line,
    cuda_home_in_use,
    host_compiler_line,
    jit_cache_line,
)
from recipes.preflight.report import Report

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


def test_an_unpatched_sglang_activation_kernel_is_an_error(tmp_path):
    _tool(tmp_path / "bin" / "g++", "12.2.0\n")
    env = {"PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin"}
    header = tmp_path / "sglang" / "jit_kernel" / "csrc" / "elementwise" / "activation.cuh"
    header.parent.mkdir(parents=True)
    header.write_text(UNPATCHED)
    ok, line = host_compiler_line(env, tmp_path / "sglang")
    assert not ok and "is unpatched and does not compile with nvcc 13.0" in line and "rerun bash scripts" in line
    header.write_text(PATCHED)
    ok, line = host_compiler_line(env, tmp_path / "sglang")
    assert ok and line.endswith("SGLang's activation kernel patched)")


def test_no_gxx_is_an_error(tmp_path):
    ok, line = host_compiler_line({"PATH": str(tmp_path)})
    assert not ok and "g++ not found on PATH" in line and "apt-get install g++" in line


def test_the_cache_line_says_where_and_how_many(tmp_path):
    env = {"HOME": str(tmp_path)}
    line = jit_cache_line(env, "0.6.11.post1")
    assert line == (f"JIT caches: SGLang (tvm-ffi) {tmp_path}/.cache/tvm-ffi (0 kernels), FlashInfer "
                    f"{tmp_path}/.cache/flashinfer/0.6.11.post1/<arch>/cached_ops (0 kernels); {FIRST_USE}")
    (tmp_path / "tvm" / "sgl_kernel_jit_activation_bf16_t_x").mkdir(parents=True)
    (tmp_path / "tvm" / "sgl_kernel_jit_activation_bf16_t_x" / "sgl.so").write_bytes(b"")
    fi = tmp_path / "ws" / ".cache" / "flashinfer" / "0.6.11.post1" / "90a" / "cached_ops"
    for name in ("batch_prefill_a", "batch_prefill_b"):
        (fi / name).mkdir(parents=True)
        (fi / name / f"{name}.so").write_bytes(b"")
    env = {"HOME": str(tmp_path), "TVM_FFI_CACHE_DIR": str(tmp_path / "tvm"),
           "FLASHINFER_WORKSPACE_BASE": str(tmp_path / "ws")}
    assert jit_cache_line(env, "0.6.11.post1") == (
        f"JIT caches: SGLang (tvm-ffi) {tmp_path}/tvm (1 kernels), FlashInfer "
        f"{tmp_path}/ws/.cache/flashinfer/0.6.11.post1/<arch>/cached_ops (2 kernels)")


def test_the_three_lines_go_into_the_report(env_cuda, tmp_path):
    _tool(tmp_path / "bin" / "g++", "12.2.0\n")
    report = Report()
    env = {"CUDA_HOME": str(env_cuda), "PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin", "HOME": str(tmp_path)}
    check_jit_toolchain(report, env, flashinfer_version="0.6.11.post1")
    assert report.errors == []
    assert [n.split(":")[0] for n in report.notes] == ["CUDA compiler", "host compiler", "JIT caches"]
    check_jit_toolchain(report, {**env, "CUDA_HOME": str(tmp_path / "none")}, flashinfer_version="0.6.11.post1")
    assert [e.split(":")[0] for e in report.errors] == ["CUDA compiler"]
