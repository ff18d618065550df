"""The GPU env's own CUDA 13 compiler: where it is, the links that make it a complete CUDA_HOME, and the startup
hook that hands it to every Python process of the env.

The lock installs nvcc, cicc, the crt/cccl/runtime/curand headers and libcudart as wheels under
site-packages/nvidia/cu13 (bin/, nvvm/, include/, lib/). SGLang's JIT (tvm-ffi) and FlashInfer find the compiler
through CUDA_HOME (else the nvcc on PATH, else /usr/local/cuda) and link with `-L$CUDA_HOME/lib64 -lcudart`, and
FlashInfer also with `-L$CUDA_HOME/lib64/stubs -lcuda`; the wheels have lib/ and libcudart.so.13 only. `prepare`
adds lib64 -> lib, lib/libcudart.so and a link-time libcuda.so stub (the driver's libcuda.so.1 is what loads at
run time), then writes a .pth hook: every interpreter of the env (the launcher's, Ray workers', SGLang servers',
on any node that has the env) starts with CUDA_HOME set to it and its bin on PATH, unless CUDA_HOME is already set.

    python -m recipes.gpu_env.cuda_toolchain prepare   # the installer's step; idempotent; prints what it did
    python -m recipes.gpu_env.cuda_toolchain show      # CUDA_HOME this env would use, or nothing without the wheels
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import site
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Iterable
from pathlib import Path

CUDA_SUBDIR = Path("nvidia") / "cu13"   # where the CUDA 13 wheels unpack inside site-packages
PTH_NAME = "gsm8k_recipe_cuda_home.pth"
STUB_SONAME = "libcuda.so.1"            # what a module linked against the stub asks the loader for


def site_dirs() -> list[Path]:
    dirs = [sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"], *site.getsitepackages()]
    return list(dict.fromkeys(Path(d) for d in dirs))


def find_cuda_home(sites: Iterable[Path]) -> Path | None:
    """The first site-packages holding the nvcc wheel's nvidia/cu13, or None."""
    for directory in sites:
        home = Path(directory) / CUDA_SUBDIR
        if (home / "bin" / "nvcc").is_file():
            return home
    return None


def pth_line(cuda_home: Path) -> str:
    """One line for a .pth file: site runs lines that start with `import` at every interpreter start."""
    home, bin_dir = str(cuda_home), str(cuda_home / "bin")
    return ("import os; os.environ.get('CUDA_HOME') or os.environ.update("
            f"CUDA_HOME={home!r}, PATH={bin_dir!r} + os.pathsep + os.environ.get('PATH', ''))\n")


def stub_source(cuda_h: str) -> str:
    """C source defining every driver entry point cuda.h declares (and the versioned names its macros map to).

    Linked modules then record a need for libcuda.so.1 whatever the linker's --as-needed default, and the
    driver's real library satisfies it when the module loads on a GPU node."""
    names = set(re.findall(r"\b(cu[A-Z]\w*)\s*\(", cuda_h))
    names |= set(re.findall(r"#define\s+cu[A-Z]\w*\s+(cu[A-Z]\w*_v\d+)\b", cuda_h))
    return "".join(f"int {name}(void) {{ return 999; }}\n" for name in sorted(names))


def _link(link: Path, target: str) -> str | None:
    if link.is_symlink() and os.readlink(link) == target:
        return None
    if link.exists() and not link.is_symlink():
        return None  # a real file someone put there: keep it
    link.unlink(missing_ok=True)
    link.symlink_to(target)
    return f"{link} -> {target}"


def prepare(cuda_home: Path, site_dir: Path, cc: str = "gcc") -> list[str]:
    """Add the links and the stub the JIT builds need, and the .pth hook; returns what changed (idempotent)."""
    done = []
    for change in (_link(cuda_home / "lib64", "lib"), _link(cuda_home / "lib" / "libcudart.so", "libcudart.so.13")):
        if change:
            done.append(change)
    stub = cuda_home / "lib" / "stubs" / "libcuda.so"
    if not stub.exists():
        compiler = shutil.which(cc)
        if compiler is None:
            raise SystemExit(f"{cc} not found: nvcc needs a host C/C++ compiler (gcc/g++ 10 to 15); "
                             "apt-get install g++ (or dnf install gcc-c++)")
        stub.parent.mkdir(exist_ok=True)
        with tempfile.TemporaryDirectory() as tmp:
            source = Path(tmp) / "cuda_stub.c"
            source.write_text(stub_source((cuda_home / "include" / "cuda.h").read_text()))
            built = Path(tmp) / "libcuda.so"
            subprocess.run([compiler, "-shared", "-fPIC", f"-Wl,-soname,{STUB_SONAME}", "-o", str(built),
                            str(source)], check=True)
            shutil.move(str(built), stub)
        done.append(f"{stub} (link-time stub; the driver's {STUB_SONAME} loads at run time)")
    pth = site_dir / PTH_NAME
    line = pth_line(cuda_home)
    if not pth.is_file() or pth.read_text() != line:
        tmp_pth = pth.with_suffix(".tmp")
        tmp_pth.write_text(line)
        tmp_pth.replace(pth)
        done.append(f"{pth}: CUDA_HOME={cuda_home} for every process of this env")
    return done


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=["prepare", "show"])
    args = parser.parse_args(argv)
    home = find_cuda_home(site_dirs())
    if args.command == "show":
        if home:
            print(home)
        return 0 if home else 1
    if home is None:
        print(f"[cuda_toolchain] ERROR: no {CUDA_SUBDIR}/bin/nvcc in {', '.join(map(str, site_dirs()))}; the lock's "
              "nvidia-cuda-nvcc is missing: reinstall with bash scripts/install_gpu_env.sh", file=sys.stderr)
        return 1
    for change in prepare(home, home.parents[1]):
        print(f"[cuda_toolchain] {change}")
    print(f"[cuda_toolchain] CUDA_HOME={home}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
