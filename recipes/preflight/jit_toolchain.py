"""Can this node compile what SGLang and FlashInfer compile at first use on a GPU? One line each for the launch
preflight: the CUDA compiler they will pick and its version, the host compiler nvcc calls and whether it is in
the range that compiles the recipe's kernels, and where the compiled kernels are cached (and how many are there).

Pure functions of an environment mapping (its PATH, CUDA_HOME, HOME and cache variables) and the files it names,
so tests drive them with stand-in executables; nothing here imports sglang, flashinfer or torch.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path

from recipes.sglang_patch import HEADER, header_is_patched

# torch 2.11.0 and sglang-kernel in the lock are CUDA 13.0 builds; the lock's nvidia-cuda-nvcc is 13.0.
CUDA_MAJOR = 13
# SGLang's JIT compiles with -std=c++20 (gcc >= 10); nvcc 13.0's crt/host_config.h refuses gcc > 15.
GCC_RANGE = (10, 15)
INSTALL = "bash scripts/install_gpu_env.sh"
FIRST_USE = ("the first rollout compiles what is missing (FlashInfer's attention: about 3-4 min on 16 cores, "
             f"9-10 min on 2 idle ones); `{INSTALL} --warm-kernels` compiles them ahead")


def cuda_home_in_use(environ: Mapping[str, str]) -> tuple[Path, str]:
    """The CUDA install tvm-ffi and FlashInfer will take, in their order: CUDA_HOME, CUDA_PATH, nvcc on PATH,
    /usr/local/cuda; and how it was found."""
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if environ.get(var):
            return Path(environ[var]), var
    nvcc = shutil.which("nvcc", path=environ.get("PATH", ""))
    if nvcc:
        return Path(nvcc).parent.parent, "nvcc on PATH"
    return Path("/usr/local/cuda"), "their default"


def _first_line(cmd: list[str], environ: Mapping[str, str]) -> str | None:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=dict(environ))
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout if out.returncode == 0 else None


def compiler_line(environ: Mapping[str, str]) -> tuple[bool, str]:
    home, how = cuda_home_in_use(environ)
    nvcc = home / "bin" / "nvcc"
    out = _first_line([str(nvcc), "--version"], environ) if nvcc.is_file() else None
    match = re.search(r"release (\d+)\.(\d+), V(\S+)", out or "")
    if match is None:
        why = "not found" if not nvcc.is_file() else "does not run"
        return False, (f"CUDA compiler: {nvcc} ({how}) {why}; SGLang and FlashInfer compile kernels with it at first "
                       f"use: reinstall the GPU env ({INSTALL}, its lock carries nvcc {CUDA_MAJOR}.0) and unset "
                       "CUDA_HOME, or point CUDA_HOME at a CUDA 13 toolkit")
    if int(match[1]) != CUDA_MAJOR:
        return False, (f"CUDA compiler: {nvcc} ({how}) is CUDA {match[1]}.{match[2]}, but torch and sglang-kernel are "
                       f"CUDA {CUDA_MAJOR} builds; unset CUDA_HOME to use the env's nvcc {CUDA_MAJOR}.0 ({INSTALL})")
    return True, f"CUDA compiler: {nvcc} {match[3]} ({how})"


def host_compiler_line(environ: Mapping[str, str], sglang_dir: Path | None = None) -> tuple[bool, str]:
    """nvcc calls gcc/g++ from PATH; SGLang 0.5.12's activation kernel compiles with gcc 12 only once patched."""
    low, high = GCC_RANGE
    want = f"nvcc {CUDA_MAJOR}.0 with SGLang's C++20 kernels needs gcc/g++ {low} to {high}"
    gxx = shutil.which("g++", path=environ.get("PATH", ""))
    version = (_first_line([gxx, "-dumpfullversion", "-dumpversion"], environ) or "").strip() if gxx else ""
    if not re.match(r"\d+", version):
        return False, f"host compiler: g++ not found on PATH; {want}: apt-get install g++ (or dnf install gcc-c++)"
    if not low <= int(version.split(".")[0]) <= high:
        return False, f"host compiler: {gxx} is gcc {version}; {want}: install one and put it first on PATH"
    patched = header_is_patched(sglang_dir) if sglang_dir else None
    if patched is False:
        return False, (f"host compiler: gcc {version}, but {sglang_dir / HEADER} is unpatched and does not compile "
                       f"with nvcc {CUDA_MAJOR}.0 (sgl-project/sglang#25487): rerun {INSTALL}, which patches it")
    patched = "; SGLang's activation kernel patched" if patched else ""
    return True, f"host compiler: {gxx} gcc {version} ({want}{patched})"


def jit_cache_line(environ: Mapping[str, str], flashinfer_version: str | None) -> str:
    home = Path(environ.get("HOME") or "~").expanduser()
    tvm = Path(environ.get("TVM_FFI_CACHE_DIR") or home / ".cache" / "tvm-ffi").expanduser()
    sglang_built = len(list(tvm.glob("sgl_kernel_jit_*/*.so")))
    fi_root = Path(environ.get("FLASHINFER_WORKSPACE_BASE") or home).expanduser() / ".cache" / "flashinfer"
    fi_dir = fi_root / flashinfer_version if flashinfer_version else fi_root
    fi_built = len(list(fi_dir.glob("*/cached_ops/*/*.so")))
    line = (f"JIT caches: SGLang (tvm-ffi) {tvm} ({sglang_built} kernels), FlashInfer {fi_dir}/<arch>/cached_ops "
            f"({fi_built} kernels)")
    return line if sglang_built and fi_built else f"{line}; {FIRST_USE}"


def check_jit_toolchain(report, environ: Mapping[str, str] | None = None,
                        flashinfer_version: str | None = None) -> None:
    """Adds the three lines to report: notes when they can compile, errors when they cannot."""
    import importlib.util
    from importlib import metadata

    environ = os.environ if environ is None else environ
    if flashinfer_version is None:
        try:
            flashinfer_version = metadata.version("flashinfer-python")
        except metadata.PackageNotFoundError:
            flashinfer_version = None
    spec = importlib.util.find_spec("sglang")  # locates the package without importing it
    sglang_dir = Path(spec.origin).parent if spec and spec.origin else None
    for ok, line in (compiler_line(environ), host_compiler_line(environ, sglang_dir)):
        (report.note if ok else report.error)(line)
    report.note(jit_cache_line(environ, flashinfer_version))
