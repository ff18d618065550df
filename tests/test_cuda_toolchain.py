"""recipes/gpu_env/cuda_toolchain.py on a stand-in site-packages laid out as the CUDA 13 wheels lay it out
(nvidia/cu13 with
bin/nvcc, include/cuda.h, lib/libcudart.so.13): the links and stub it adds, and the .pth hook that hands CUDA_HOME
to fresh interpreters (real `site` processing, real subprocesses, a real gcc build of the stub)."""

import ctypes
import os
import shutil
import subprocess
import sys

import pytest

from recipes.gpu_env import cuda_toolchain

pytestmark = pytest.mark.integration

# A few declarations in cuda.h's own style: a plain entry point, and one its macros map to a versioned symbol.
CUDA_H = """
#define cuMemAlloc cuMemAlloc_v2
CUresult CUDAAPI cuInit(unsigned int Flags);
CUresult CUDAAPI cuLaunchKernel(CUfunction f, unsigned int gridDimX);
CUresult CUDAAPI cuMemAlloc(CUdeviceptr *dptr, size_t bytesize);
"""


@pytest.fixture
def site_dir(tmp_path):
    site = tmp_path / "site-packages"
    home = site / "nvidia" / "cu13"
    for sub in ("bin", "include", "lib"):
        (home / sub).mkdir(parents=True)
    (home / "bin" / "nvcc").write_text("#!/bin/sh\n")
    (home / "bin" / "nvcc").chmod(0o755)
    (home / "include" / "cuda.h").write_text(CUDA_H)
    (home / "lib" / "libcudart.so.13").write_bytes(b"")
    return site


def _python_sees(site_dir, env, code="import os; print(os.environ.get('CUDA_HOME'))"):
    """A fresh interpreter that processes site_dir's .pth files as its site-packages, as the env's python does."""
    proc = subprocess.run([sys.executable, "-c", f"import site; site.addsitedir({str(site_dir)!r}); {code}"],
                          env=env, capture_output=True, text=True, timeout=60, check=True)
    return proc.stdout.strip()


def test_the_cuda_home_is_the_site_packages_that_holds_nvcc(site_dir, tmp_path):
    empty = tmp_path / "other-site"
    empty.mkdir()
    assert cuda_toolchain.find_cuda_home([empty, site_dir]) == site_dir / "nvidia" / "cu13"
    assert cuda_toolchain.find_cuda_home([empty]) is None


@pytest.mark.skipif(shutil.which("gcc") is None, reason="the stub is built with gcc")
def test_prepare_makes_the_paths_tvm_ffi_and_flashinfer_link_with(site_dir):
    home = site_dir / "nvidia" / "cu13"
    changes = cuda_toolchain.prepare(home, site_dir)
    # tvm-ffi: -L$CUDA_HOME/lib64 -lcudart; FlashInfer: also -L$CUDA_HOME/lib64/stubs -lcuda
    assert (home / "lib64" / "libcudart.so").resolve() == (home / "lib" / "libcudart.so.13").resolve()
    stub = home / "lib64" / "stubs" / "libcuda.so"
    assert stub.is_file() and len(changes) == 4
    lib = ctypes.CDLL(str(stub))
    assert lib.cuLaunchKernel() == 999 and lib.cuMemAlloc_v2() == 999 and lib.cuInit() == 999
    soname = subprocess.run(["objdump", "-p", str(stub)], capture_output=True, text=True).stdout
    assert "SONAME               libcuda.so.1" in soname  # what a linked module loads: the driver's library
    assert cuda_toolchain.prepare(home, site_dir) == []  # a second install changes nothing


@pytest.mark.skipif(shutil.which("gcc") is None, reason="the stub is built with gcc")
def test_every_new_interpreter_of_the_env_gets_its_cuda_home_and_nvcc_on_path(site_dir):
    home = site_dir / "nvidia" / "cu13"
    cuda_toolchain.prepare(home, site_dir)
    env = {k: v for k, v in os.environ.items() if k not in ("CUDA_HOME", "CUDA_PATH")}
    env["PATH"] = "/usr/bin:/bin"
    assert _python_sees(site_dir, env) == str(home)
    # ...and what it starts (a Ray worker, an SGLang server) inherits both, nvcc first on PATH
    child = ("import os, shutil, subprocess, sys; subprocess.run([sys.executable, '-c', "
             "'import os, shutil; print(os.environ[\"CUDA_HOME\"], shutil.which(\"nvcc\"))'])")
    assert _python_sees(site_dir, env, child) == f"{home} {home / 'bin' / 'nvcc'}"


@pytest.mark.skipif(shutil.which("gcc") is None, reason="the stub is built with gcc")
def test_a_cuda_home_set_by_hand_wins(site_dir):
    cuda_toolchain.prepare(site_dir / "nvidia" / "cu13", site_dir)
    env = {**os.environ, "CUDA_HOME": "/opt/my-cuda", "PATH": "/usr/bin:/bin"}
    assert _python_sees(site_dir, env, "import os; print(os.environ['CUDA_HOME'], os.environ['PATH'])") == \
        "/opt/my-cuda /usr/bin:/bin"


def test_the_stub_defines_what_cuda_h_declares_and_its_versioned_names():
    source = cuda_toolchain.stub_source(CUDA_H)
    for name in ("cuInit", "cuLaunchKernel", "cuMemAlloc", "cuMemAlloc_v2"):
        assert f"int {name}(void)" in source
    assert "CUresult" not in source and "CUDAAPI" not in source


def test_prepare_without_a_host_compiler_says_what_to_install(site_dir):
    with pytest.raises(SystemExit, match="apt-get install g\\+\\+"):
        cuda_toolchain.prepare(site_dir / "nvidia" / "cu13", site_dir, cc="no-such-gcc")
