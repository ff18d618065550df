#!/usr/bin/env bash
# One command on a fresh x86_64 Linux GPU node: the pinned training environment (verl 0.9.1, SGLang 0.5.12,
# CUDA 13 torch 2.11.0, transformers 5.9.0, weave, wandb) in a virtual environment, exactly as locked.
#
#   bash scripts/install_gpu_env.sh                  # -> .venv-gpu in the repo, which the GPU scripts then use
#   VENV=/shared/envs/gsm8k BASE_PYTHON=/usr/bin/python3.12 bash scripts/install_gpu_env.sh
#   bash scripts/install_gpu_env.sh --in-image       # inside a container (e.g. lmsysorg/sglang:v0.5.12): its own
#                                                    # python3, only the packages whose version differs change
#   bash scripts/install_gpu_env.sh --warm-kernels   # also compile the kernels an H100 run compiles at first use
#                                                    # (no GPU needed; time: docs/measured.md#gpu_kernel_compile_total_seconds)
#
# Installs requirements/gpu.txt and nothing else: every package pinned and hash-checked, wheels only (one
# pure-Python sdist, antlr4-python3-runtime, is built from source). Re-running it brings the env back to the lock.
# Then the recipe's own packages (recipes, tools, data_prep) go in editable (pyproject.toml, no deps), so
# `python data_prep/gsm8k.py` and scripts/*.py import them from anywhere. SGLang and FlashInfer compile CUDA kernels
# at first use: the lock carries CUDA 13.0's nvcc and headers, recipes/gpu_env/cuda_toolchain.py makes them the CUDA_HOME
# of every process of the env, and recipes/gpu_env/sglang_patch.py fixes SGLang 0.5.12's activation kernel for them.
# Needs: Python 3.12 with venv, glibc >= 2.34, an NVIDIA driver >= 580 (CUDA 13), libnuma.so.1, gcc/g++ 10 to 15
# and patch (nvcc's host compiler; apt-get install g++ patch), disk for the env (docs/measured.md#gpu_env_gb).
. "$(dirname "${BASH_SOURCE[0]}")/help.sh" "$@"  # -h/--help: usage, knobs; runs nothing
set -euo pipefail

REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
IN_IMAGE=0
WARM_KERNELS=0
for arg in "$@"; do
  case "$arg" in
    --in-image) IN_IMAGE=1 ;;
    --warm-kernels) WARM_KERNELS=1 ;;
    *) echo "usage: bash scripts/install_gpu_env.sh [--in-image] [--warm-kernels] (--help: what each does)" >&2; exit 2 ;;
  esac
done
. "$REPO_ROOT/scripts/python_env.sh"
VENV=${VENV:-$REPO_ROOT/.venv-gpu}
BASE_PYTHON=${BASE_PYTHON:-}                        # the interpreter the env is made from; empty: the first CPython
                                                    # 3.12 that runs (python3, python3.12, pyenv's); --in-image: python3
LOCK=$REPO_ROOT/requirements/gpu.txt
UV_VERSION=0.13.9                                   # the uv that wrote the lock (see requirements/gpu.in)
if [ "$IN_IMAGE" = 1 ]; then UV_DEFAULT=/tmp/uv-$UV_VERSION; else UV_DEFAULT=$VENV/.uv-$UV_VERSION; fi
UV_DIR=${UV_DIR:-$UV_DEFAULT}                       # uv lives beside the env, not in it: sync would remove it
CHECK_DRIVER=${CHECK_DRIVER:-1}                     # 0: install on a machine without the GPU driver
WARM_HEAD_DIMS=${WARM_HEAD_DIMS:-64 128}            # --warm-kernels: Qwen2.5-0.5B has head_dim 64; 1.5B, 3B, 7B 128
export UV_PYTHON_DOWNLOADS=never                    # use the Python given, never a downloaded one

die() { echo "error: $*" >&2; exit 1; }
say() { echo "[install_gpu_env] $*"; }

# ---- the node ---------------------------------------------------------------------------------------
[ "$(uname -m)" = x86_64 ] || die "the lock is for x86_64 Linux; this is $(uname -sm)"
if [ -z "$BASE_PYTHON" ] && [ "$IN_IMAGE" = 1 ]; then BASE_PYTHON=python3; fi
if [ -z "$BASE_PYTHON" ]; then  # a broken python3.12 (a pyenv shim) is named in a note, before anything it prints
  BASE_PYTHON=$(find_base_python 3.12) \
    || die "no CPython 3.12 that runs found (SGLang 0.5.12 ships cp312 wheels only): install it (apt-get install" \
           "python3.12-venv; or pyenv install 3.12), or set BASE_PYTHON=/path/to/python3.12"
fi
PYTHON=$BASE_PYTHON
command -v "$PYTHON" >/dev/null \
  || die "$PYTHON not found; SGLang 0.5.12 ships for CPython 3.12 only: install it, or set BASE_PYTHON=/path/to/python3.12"
"$PYTHON" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 12))' 2>/dev/null \
  || die "$PYTHON does not run as CPython 3.12, which the lock is for (SGLang 0.5.12 ships cp312 wheels only);" \
         "set BASE_PYTHON=/path/to/python3.12. It says: $("$PYTHON" --version 2>&1 | head -n 1)"
say "base python: $PYTHON ($("$PYTHON" --version 2>&1))"
GLIBC=$("$PYTHON" -c 'import platform; print(platform.libc_ver()[1] or "0.0")')
IFS=. read -r GLIBC_MAJOR GLIBC_MINOR _ <<<"$GLIBC.0"
[ "$GLIBC_MAJOR" -gt 2 ] 2>/dev/null || { [ "$GLIBC_MAJOR" -eq 2 ] && [ "$GLIBC_MINOR" -ge 34 ]; } 2>/dev/null \
  || die "glibc $GLIBC found; sglang 0.5.12's wheel needs glibc >= 2.34 (Ubuntu 22.04+, RHEL 9+)"
if [ "$CHECK_DRIVER" = 1 ]; then
  command -v nvidia-smi >/dev/null \
    || die "nvidia-smi not found: cannot check the NVIDIA driver (torch 2.11.0 here is a CUDA 13 build: driver >= 580);" \
           "CHECK_DRIVER=0 to install anyway"
  DRIVER=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader | tr -d ' ' | sort -V | head -n1)  # the oldest
  [ "${DRIVER%%.*}" -ge 580 ] 2>/dev/null \
    || die "NVIDIA driver $DRIVER found; the locked torch 2.11.0 and sglang 0.5.12 are CUDA 13 builds and need driver >= 580"
fi
command -v g++ >/dev/null && command -v gcc >/dev/null \
  || die "gcc/g++ not found: nvcc (in the lock) needs them to compile SGLang's and FlashInfer's kernels at first" \
         "use; apt-get install g++ (or dnf install gcc-c++)"
command -v patch >/dev/null || die "patch not found (it fixes SGLang 0.5.12's activation kernel); apt-get install patch"
if ! { ldconfig -p || /sbin/ldconfig -p; } 2>/dev/null | grep -q 'libnuma\.so\.1'; then
  echo "warning: libnuma.so.1 not found; sglang-kernel needs it at run time: apt-get install libnuma1 (or numactl-libs)" >&2
fi

# ---- the env ----------------------------------------------------------------------------------------
if [ "$IN_IMAGE" = 1 ]; then
  TARGET=$(command -v "$PYTHON")
else
  if [ ! -x "$VENV/bin/python" ]; then
    say "creating $VENV"
    "$PYTHON" -m venv "$VENV" || die "$PYTHON -m venv failed; on Debian/Ubuntu: apt-get install python3.12-venv"
  fi
  "$VENV/bin/python" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 12))' \
    || die "$VENV is not a Python 3.12 env; remove it or set VENV=another/path"
  TARGET=$VENV/bin/python
fi
UV=$UV_DIR/bin/uv
if [ ! -x "$UV" ]; then
  say "getting uv $UV_VERSION"
  PIP=("$TARGET" -m pip)
  "${PIP[@]}" --version >/dev/null 2>&1 || PIP=("$PYTHON" -m pip)
  "${PIP[@]}" install -q --disable-pip-version-check --target "$UV_DIR" "uv==$UV_VERSION" \
    || die "could not install uv $UV_VERSION (pip install uv==$UV_VERSION); put it at $UV or set UV_DIR"
fi
WHEELS=(--require-hashes --only-binary :all: --no-binary antlr4-python3-runtime)
if [ "$IN_IMAGE" = 1 ]; then
  say "bringing $TARGET to requirements/gpu.txt: only packages whose version differs change, the image's others stay"
  # --no-deps: exactly the locked versions, no resolver (sglang's own metadata would pull transformers 5.6.0)
  "$UV" pip install --python "$TARGET" --break-system-packages --no-deps "${WHEELS[@]}" -r "$LOCK"
else
  say "installing $(grep -c '^[A-Za-z0-9].*==' "$LOCK") pinned packages from requirements/gpu.txt (download and disk: docs/measured.md#gpu_install_minutes)"
  # sync: exactly the lock, no resolver, and anything else is removed from the env
  "$UV" pip sync --python "$TARGET" "${WHEELS[@]}" "$LOCK"
fi

if [ "$IN_IMAGE" = 1 ]; then SYSTEM=(--break-system-packages); else SYSTEM=(); fi
say "installing the recipe's packages from $REPO_ROOT (editable, no dependencies)"
"$UV" pip install --python "$TARGET" "${SYSTEM[@]}" --no-deps -e "$REPO_ROOT"

cd "$REPO_ROOT"
"$TARGET" -m recipes.preflight.versions --lock "$LOCK"
SITE=$("$TARGET" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
"$TARGET" -m recipes.gpu_env.sglang_patch "$SITE" || die "SGLang's activation kernel cannot be patched (above)"
"$TARGET" -m recipes.gpu_env.cuda_toolchain prepare || die "the env's CUDA compiler cannot be set up (above)"
if [ "$WARM_KERNELS" = 1 ]; then
  say "compiling the kernels an H100 run compiles at first use (recipes/gpu_env/kernel_census.py), into ~/.cache/tvm-ffi" \
      "and ~/.cache/flashinfer; SGLang's serve only an env at this same path (docs/first-use-kernels.md)"
  # shellcheck disable=SC2086  # a list
  "$TARGET" -m recipes.gpu_env.jit_kernels --head-dims $WARM_HEAD_DIMS || die "a kernel did not compile (above)"
fi
if [ "$IN_IMAGE" = 1 ]; then
  say "done. Launch with: bash scripts/run_gsm8k_grpo.sh"
else
  say "done: the GPU scripts use ${VENV#"$PWD"/} by themselves (activating it is optional); next: bash scripts/smoke_1gpu.sh"
fi
