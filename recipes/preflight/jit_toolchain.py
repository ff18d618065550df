"""Can this node compile what SGLang and FlashInfer compile at first use on a GPU? One line each for the launch
preflight: the CUDA compiler they will pick and its version, the host compiler nvcc calls and whether it is in
the range that compiles the recipe's kernels, whether SGLang's activation header carries the recipe's patch, and
where the compiled kernels are cached: how many each cache (and FlashInfer's AOT folders) holds, and which
modules of the census (recipes/gpu_env/kernel_census.py) for the launch's model are not there yet.

Pure functions of an environment mapping (its PATH, CUDA_HOME, HOME and cache variables) and the files it names,
so tests drive them with stand-in executables; nothing here imports sglang, flashinfer or torch.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from recipes.gpu_env.kernel_census import CUDA_NORM, FLASHINFER_ARCH_DIR, QWEN25, Module, census, modules_for, shape_of
from recipes.gpu_env.sglang_patch import HEADER, header_is_patched

# torch 2.11.0 and sglang-kernel in the lock are CUDA 13.0 builds; the lock's nvidia-cuda-nvcc is 13.0.
CUDA_MAJOR = 13
# SGLang's JIT compiles with -std=c++20 (gcc >= 10); nvcc 13.0's crt/host_config.h refuses gcc > 15.
GCC_RANGE = (10, 15)
INSTALL = "bash scripts/install_gpu_env.sh"
FIRST_USE = ("the first rollout compiles what is missing (minutes per module on few cores: "
             f"docs/measured.md#gpu_kernel_compile_total_seconds); `{INSTALL} --warm-kernels` compiles them ahead")
TVM_HASH = re.compile(r"_[0-9a-f]{16}$")  # tvm-ffi's cache folder: <module name>_<16 hex digits of its sources>


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


def host_compiler_line(environ: Mapping[str, str]) -> tuple[bool, str]:
    """nvcc calls gcc/g++ from PATH."""
    low, high = GCC_RANGE
    want = f"nvcc {CUDA_MAJOR}.0 with SGLang's C++20 kernels needs gcc/g++ {low} to {high}"
    gxx = shutil.which("g++", path=environ.get("PATH", ""))
    version = (_first_line([gxx, "-dumpfullversion", "-dumpversion"], environ) or "").strip() if gxx else ""
    if not re.match(r"\d+", version):
        return False, f"host compiler: g++ not found on PATH; {want}: apt-get install g++ (or dnf install gcc-c++)"
    if not low <= int(version.split(".")[0]) <= high:
        return False, f"host compiler: {gxx} is gcc {version}; {want}: install one and put it first on PATH"
    return True, f"host compiler: {gxx} gcc {version} ({want})"


def sglang_header_line(sglang_dir: Path | None) -> tuple[bool, str]:
    """SGLang 0.5.12's activation kernel compiles with nvcc 13 only once the installer has patched its header."""
    if sglang_dir is None:
        return True, "SGLang header: sglang is not installed, no activation header to check"
    header = sglang_dir / HEADER
    patched = header_is_patched(sglang_dir)
    if patched is None:
        return True, f"SGLang header: {header} not found (not the sglang 0.5.12 the recipe patches)"
    if not patched:
        return False, (f"SGLang header: {header} is unpatched and does not compile with nvcc {CUDA_MAJOR}.0 "
                       f"(sgl-project/sglang#25487): rerun {INSTALL}, which patches it")
    return True, f"SGLang header: {header} patched for nvcc {CUDA_MAJOR}.0 (sgl-project/sglang#25487)"


def _sglang_built(tvm: Path, module: Module, sglang_dir: Path | None) -> bool:
    """A tvm-ffi folder of this module whose .so is there and, when sglang_dir is known, whose sources include
    that sglang's headers: tvm-ffi hashes the absolute include paths, so an env elsewhere never reuses it."""
    for folder in tvm.glob(f"{module.name}_*"):
        if not TVM_HASH.search(folder.name[len(module.name):]) or not (folder / f"{module.name}.so").is_file():
            continue
        sources = " ".join(p.read_text(errors="replace") for p in (folder / "cuda.cu", folder / "main.cpp")
                           if p.is_file())
        if sglang_dir is None or str(sglang_dir / "jit_kernel") in sources:
            return True
    return False


def jit_cache_line(environ: Mapping[str, str], flashinfer_version: str | None, modules: list[Module] | None = None,
                   sglang_dir: Path | None = None, aot_dirs: tuple[Path, ...] = ()) -> str:
    """Where the caches are, how many modules each holds (FlashInfer's AOT folders too), and which of `modules`
    (the census; all of Qwen2.5's by default) none of them has."""
    modules = census() if modules is None else modules
    home = Path(environ.get("HOME") or "~").expanduser()
    tvm = Path(environ.get("TVM_FFI_CACHE_DIR") or home / ".cache" / "tvm-ffi").expanduser()
    sglang_count = len(list(tvm.glob("sgl_kernel_jit_*/*.so")))
    fi_root = Path(environ.get("FLASHINFER_WORKSPACE_BASE") or home).expanduser() / ".cache" / "flashinfer"
    fi_dir = fi_root / flashinfer_version if flashinfer_version else fi_root
    fi_count = len(list(fi_dir.glob("*/cached_ops/*/*.so")))
    aot_dirs = tuple(d for d in aot_dirs if d.is_dir())
    aot_count = sum(len(list(d.glob("*/*.so"))) for d in aot_dirs)
    fi_places = [fi_dir / FLASHINFER_ARCH_DIR / "cached_ops", *aot_dirs]
    missing = [m.key for m in modules
               if not (_sglang_built(tvm, m, sglang_dir) if m.library == "sglang"
                       else any((d / m.name / f"{m.name}.so").is_file() for d in fi_places))]
    aot = f", AOT {', '.join(map(str, aot_dirs))} ({aot_count} modules)" if aot_dirs else ", no AOT modules"
    line = (f"JIT caches: SGLang (tvm-ffi) {tvm} ({sglang_count} kernels), FlashInfer {fi_dir}/<arch>/cached_ops "
            f"({fi_count} kernels){aot}; first-use census for {_served(modules)}: "
            f"{len(modules) - len(missing)} of {len(modules)} built")
    return f"{line}, missing {', '.join(missing)}; {FIRST_USE}" if missing else line


def _served(modules: list[Module]) -> str:
    names = list(dict.fromkeys(name for m in modules for name in m.models))
    return ", ".join(names) if names else "no model"


def launch_census(model: str) -> list[Module]:
    """The census for the model a launch names (its config.json when it is a folder here, else a Qwen2.5 hub id);
    all of Qwen2.5's when neither tells its shape."""
    config_file = Path(os.path.expanduser(model)) / "config.json"
    try:
        config = json.loads(config_file.read_text()) if config_file.is_file() else None
    except (OSError, ValueError):
        config = None
    shape = shape_of(model, config)
    if shape is None:
        return census(QWEN25)
    return census([shape]) if shape in QWEN25 else [replace(m, models=(model,)) for m in modules_for(shape)]


def flashinfer_cuda_norm(environ: Mapping[str, str]) -> bool:
    """Whether FlashInfer will compile its CUDA norm module here: where its CuTe DSL norm kernels do not import (no
    `cutlass` from nvidia-cutlass-dsl) or FLASHINFER_USE_CUDA_NORM=1 (flashinfer/norm/__init__.py:56-71). Found
    without importing cutlass."""
    import importlib.util

    return environ.get("FLASHINFER_USE_CUDA_NORM", "0") == "1" or importlib.util.find_spec("cutlass") is None


def needed_here(modules: list[Module], environ: Mapping[str, str], cuda_norm: bool | None = None) -> list[Module]:
    """The census modules this env compiles at first use (those with a condition only where it holds)."""
    cuda_norm = flashinfer_cuda_norm(environ) if cuda_norm is None else cuda_norm
    return [m for m in modules if m.only_if != CUDA_NORM or cuda_norm]


def flashinfer_aot_dirs() -> tuple[Path, ...]:
    """Where FlashInfer looks for prebuilt modules (flashinfer/jit/env.py): the flashinfer-jit-cache package's
    jit_cache folder, else flashinfer's own data/aot. Found without importing either."""
    import importlib.util

    dirs = []
    for package, sub in (("flashinfer_jit_cache", "jit_cache"), ("flashinfer", "data/aot")):
        spec = importlib.util.find_spec(package)
        if spec and spec.origin:
            dirs.append(Path(spec.origin).parent / sub)
    return tuple(dirs)


def check_jit_toolchain(report, environ: Mapping[str, str] | None = None, flashinfer_version: str | None = None,
                        model: str | None = None) -> None:
    """Adds the four lines to report: notes when they can compile, errors when they cannot."""
    import importlib.util
    from importlib import metadata

    environ = os.environ if environ is None else environ
    if flashinfer_version is None:
        try:
            flashinfer_version = metadata.version("flashinfer-python")
        except metadata.PackageNotFoundError:
            flashinfer_version = None
    spec = importlib.util.find_spec("sglang")  # locates the package without importing it
    sglang_dir = Path(spec.origin).resolve().parent if spec and spec.origin else None  # as SGLang's JIT names it
    for ok, line in (compiler_line(environ), host_compiler_line(environ), sglang_header_line(sglang_dir)):
        (report.note if ok else report.error)(line)
    modules = needed_here(launch_census(model) if model else census(), environ)
    report.note(jit_cache_line(environ, flashinfer_version, modules, sglang_dir, flashinfer_aot_dirs()))
