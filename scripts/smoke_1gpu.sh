#!/usr/bin/env bash
# Two training steps of the whole recipe on one GPU with Qwen2.5-0.5B-Instruct (PROFILE=1gpu_smoke): checks the GPU
# install before you reserve a node. Runs in the project's GPU env (.venv-gpu, from scripts/install_gpu_env.sh) and
# prepares its own GSM8K rows, as scripts/smoke_cpu.sh does: from GSM8K_DIR if given, else the hub, else the small
# sample in data_prep/gsm8k_sample. Extra arguments go to the launcher. Time: docs/measured.md.
#   bash scripts/smoke_1gpu.sh
#   DATA_DIR=~/data/gsm8k bash scripts/smoke_1gpu.sh       # parquet prepared earlier by python data_prep/gsm8k.py
HELP_KNOBS_OF=run_gsm8k_grpo.sh . "$(dirname "${BASH_SOURCE[0]}")/help.sh" "$@"  # -h/--help: usage, knobs; runs nothing
set -euo pipefail

REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
. "$REPO_ROOT/scripts/python_env.sh"
PYTHON=${PYTHON:-}                          # empty: the active venv, else the project's GPU env (.venv-gpu)
WORK_DIR=${WORK_DIR:-/tmp/gsm8k_1gpu_smoke} # where its rows are prepared, unless DATA_DIR is given
GSM8K_DIR=${GSM8K_DIR:-}                    # GSM8K's {train,test}.jsonl; empty: the hub, else the sample
DATA_DIR=${DATA_DIR:-}                      # parquet prepared earlier; empty: prepared into WORK_DIR/data
use_python gpu

if [ -z "$DATA_DIR" ]; then  # 2 steps x 8 prompts; validation scores up to 64 rows (config/profile/1gpu_smoke.yaml)
  SOURCE=(--fallback_sample)
  if [ -n "$GSM8K_DIR" ]; then SOURCE=(--input_dir "$GSM8K_DIR"); fi
  (cd "$REPO_ROOT" && "$PYTHON" data_prep/gsm8k.py "${SOURCE[@]}" --train_size 256 --test_size 64 \
    --local_save_dir "$WORK_DIR/data") >&2
  export DATA_DIR=$WORK_DIR/data
fi
PROFILE=1gpu_smoke exec bash "$REPO_ROOT/scripts/run_gsm8k_grpo.sh" "$@"
