# shellcheck shell=bash
# Sourced, not run: the environment verl needs in every process of a run on scripts/harness/cpu_backend's CPU stand-ins
# (no GPU). Ray workers inherit the driver's environment. Used by scripts/smoke_cpu.sh, scripts/learn_cpu.sh and
# `DEVICE=cpu bash scripts/eval_gsm8k.sh`; the profile (cpu_smoke, ...) selects the CPU rollout and engine.
# the CPU backend is not in the installed package: scripts/harness/ on every process's path (Ray workers inherit it)
_RECIPE_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
case ":${PYTHONPATH:-}:" in *":$_RECIPE_ROOT/scripts:"*) ;; *) export PYTHONPATH="$_RECIPE_ROOT:$_RECIPE_ROOT/scripts${PYTHONPATH:+:$PYTHONPATH}" ;; esac
export VERL_USE_EXTERNAL_MODULES="harness.cpu_backend.plugin${VERL_USE_EXTERNAL_MODULES:+,$VERL_USE_EXTERNAL_MODULES}"
export VERL_PLATFORM=cpu      # the preflight then counts no GPUs: the ranks are Ray's logical GPUs
export RAY_ADDRESS=local      # a fresh local Ray instance, never another cluster running on this machine
export RAY_DEDUP_LOGS=0       # keep every replica's weight-checksum line (Ray folds lines that differ in numbers)
# Ray starts an idle Python worker per logical CPU (the profile's 16) when the driver connects; the run's actors start
# their own, and on a few cores the idle ones only take CPU from them
export RAY_prestart_worker_first_driver=0
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}  # one thread per process: the ranks and servers share the cores
export TOKENIZERS_PARALLELISM=false
