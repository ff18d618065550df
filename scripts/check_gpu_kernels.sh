#!/usr/bin/env bash
# Does the GPU env compile every kernel an H100 run compiles at first use? On any x86_64 Linux machine, no GPU
# needed: builds the env from requirements/gpu.txt with the README's installer (CHECK_DRIVER=0), then, with only
# that env's toolchain, compiles into fresh caches every nvcc module of the census (recipes/gpu_env/kernel_census.py:
# SGLang's activation, RoPE, KV-cache store, clamp_position and resolve_future_token_ids kernels, FlashInfer's
# fa2/fa3 attention, cascade and CUDA norm modules, for Qwen2.5's head dims), one line per module with its time, and checks
# that Triton's ptxas is the env's. Exit 0 when all compile; the last line is a RESULT line for
# scripts/record_measured.py.
#
#   bash scripts/check_gpu_kernels.sh                       # disk and time: docs/measured.md#gpu_kernel_check_seconds
#   VENV=/big/disk/env MAX_JOBS=8 bash scripts/check_gpu_kernels.sh
#
# Any CUDA on the machine (/usr/local/cuda, an nvcc on PATH, CUDA_HOME, CPATH...) is kept out of it: the env must
# bring its own, so the check fails on a lock without a compiler even where a toolkit happens to be installed.
. "$(dirname "${BASH_SOURCE[0]}")/help.sh" "$@"  # -h/--help: usage, knobs; runs nothing
set -euo pipefail

REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENV=${VENV:-/tmp/gsm8k-gpu-check/env}               # the env to build (reused: the installer syncs it to the lock)
BASE_PYTHON=${BASE_PYTHON:-}                           # the env's interpreter; empty: the first CPython 3.12 that runs
MAX_JOBS=${MAX_JOBS:-$(nproc)}                         # parallel compiles (ninja)
HEAD_DIMS=${HEAD_DIMS:-64 128}                         # Qwen2.5-0.5B: 64; 1.5B, 3B, 7B: 128
CACHES=${CACHES:-$VENV.jit-cache}                     # where the kernels are compiled (not ~/.cache)
FRESH=${FRESH:-1}                                      # 1: empty CACHES first, so every kernel is compiled now
                                                       # (only a CACHES the check made, or a new or empty one)

die() { echo "[check_gpu_kernels] FAIL: $*" >&2; exit 1; }
say() { echo "[check_gpu_kernels $(date -u +%H:%M:%S)] $*"; }

. "$REPO_ROOT/scripts/python_env.sh"
if [ -z "$BASE_PYTHON" ]; then
  BASE_PYTHON=$(find_base_python 3.12) || die "no CPython 3.12 that runs found (set BASE_PYTHON=/path/to/python3.12)"
fi
PYTHON_PATH=$(command -v "$BASE_PYTHON") || die "$BASE_PYTHON not found (set BASE_PYTHON=/path/to/python3.12)"
# CACHES is emptied below only if the check made it (or it is new or empty): recipes/folder_guard.py, asked now,
# before the install's minutes
guard() { PYTHONPATH=$REPO_ROOT "$PYTHON_PATH" -m recipes.folder_guard "$1" --made-by check_gpu_kernels \
            --knob CACHES "$CACHES" || exit 1; }
if [ "$FRESH" = 1 ]; then guard check; fi
# Only the system's basic tools (gcc, patch) and the env's own bin: no other CUDA on any search path.
unset CUDA_HOME CUDA_PATH CPATH C_INCLUDE_PATH CPLUS_INCLUDE_PATH LIBRARY_PATH LD_LIBRARY_PATH NVCC_PREPEND_FLAGS \
      NVCC_APPEND_FLAGS FLASHINFER_NVCC TVM_FFI_CUDA_ARCH_LIST
export PATH=/usr/bin:/bin
if command -v nvcc >/dev/null; then die "$(command -v nvcc) is on the system PATH: the check cannot tell it from the env's"; fi
export MAX_JOBS

T0=$SECONDS
say "installing $VENV from requirements/gpu.txt with scripts/install_gpu_env.sh (CHECK_DRIVER=0)"
CHECK_DRIVER=0 VENV=$VENV BASE_PYTHON=$PYTHON_PATH bash "$REPO_ROOT/scripts/install_gpu_env.sh"
INSTALL_S=$((SECONDS - T0))
say "install: ${INSTALL_S} s; env on disk: $(du -sh "$VENV" | cut -f1)"

# The env's own compiler, as its processes see it (the installer's startup hook), and nothing from outside it.
HOME_SEEN=$("$VENV/bin/python" -c 'import os; print(os.environ.get("CUDA_HOME", ""))')
case "$HOME_SEEN" in
  "$VENV"/*) ;;
  "") die "the env sets no CUDA_HOME: requirements/gpu.txt brings no CUDA compiler (nvidia-cuda-nvcc), so SGLang and FlashInfer would look for /usr/local/cuda" ;;
  *) die "the env's CUDA_HOME is $HOME_SEEN, outside $VENV" ;;
esac
say "CUDA compiler: $("$HOME_SEEN/bin/nvcc" --version | grep release); host: $(g++ --version | head -n1)"

if [ "$FRESH" = 1 ]; then guard clear; else mkdir -p "$CACHES"; fi
export TVM_FFI_CACHE_DIR=$CACHES/tvm-ffi FLASHINFER_WORKSPACE_BASE=$CACHES
T1=$SECONDS
# shellcheck disable=SC2086  # HEAD_DIMS is a list
(cd "$REPO_ROOT" && nice -n "${NICE:-0}" "$VENV/bin/python" -m recipes.gpu_env.jit_kernels --head-dims $HEAD_DIMS) \
  || die "a kernel did not compile (the first error is above)"
COMPILE_S=$((SECONDS - T1))
# Every build file names the env's nvcc (FlashInfer's as $cuda_home/bin/nvcc): nothing fell back to another toolkit.
if grep -rhE '^ *(nvcc|cuda_home) *=' "$CACHES" --include=build.ninja | grep -v -e "= $VENV/" -e '= \$cuda_home/' \
    | sort -u | grep .; then
  die "a kernel was built with an nvcc outside the env (above)"
fi
CACHE_MIB=$(du -sm "$CACHES" | cut -f1)
say "PASS: compiled in ${COMPILE_S} s with MAX_JOBS=$MAX_JOBS (install ${INSTALL_S} s); caches ${CACHE_MIB} MiB, env $(du -sh "$VENV" | cut -f1)"
echo "RESULT gpu_kernel_check_seconds=$((SECONDS - T0)) gpu_kernel_check_install_seconds=$INSTALL_S gpu_kernel_cache_mib=$CACHE_MIB"
