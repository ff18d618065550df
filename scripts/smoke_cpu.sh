#!/usr/bin/env bash
# verl's real trainer end to end on a machine with no GPU: `python -m verl.trainer.main_ppo` through the recipe's
# launcher, preflight and config, with PROFILE=cpu_smoke (config/profile/cpu_smoke.yaml: only what the hardware
# forces). A tiny random Qwen2 model (Qwen2.5 tokenizer and chat template, built offline) trains two GRPO steps on a
# few GSM8K rows with multi-turn calculator calls, validates, saves a checkpoint, then a second launch resumes
# from it into a third step; the rollout report and eval summary run on the dumps. Time and RAM: docs/measured.md
# (smoke_cpu_minutes, smoke_cpu_ram_gb). The CPU stand-ins (platform, FSDP2 engine, rollout server) are in
# recipes/cpu_backend.
# tests/test_e2e_cpu.py runs it with tracing on against a loopback W&B (one agent-loop worker's weave.init failing).
#
#   bash scripts/smoke_cpu.sh                                # work dir /tmp/gsm8k_cpu_smoke
#   bash scripts/smoke_cpu.sh trainer.test_freq=1            # hydra overrides go to both launches, last
#   RESUME_CHECK=0 bash scripts/smoke_cpu.sh                 # only the first launch
#   TRACE=on LOGGER=console,wandb bash scripts/smoke_cpu.sh  # any launcher knob passes through
. "$(dirname "${BASH_SOURCE[0]}")/help.sh" "$@"  # -h/--help: usage, knobs; runs nothing
set -euo pipefail

REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

# ---- knobs ------------------------------------------------------------------------------------------
PYTHON=${PYTHON:-python3}
WORK_DIR=${WORK_DIR:-/tmp/gsm8k_cpu_smoke}            # model, data and (by default) outputs
OUTPUT_DIR=${OUTPUT_DIR:-$WORK_DIR/outputs}           # checkpoints, dumps, logs, report: cleared at the start
GSM8K_DIR=${GSM8K_DIR-$REPO_ROOT/../shared/data/gsm8k}  # GSM8K's {train,test}.jsonl; empty: the hub
TRAIN_ROWS=${TRAIN_ROWS:-6}                           # 3 steps x 2 prompts, no row seen twice
TEST_ROWS=${TEST_ROWS:-4}
RESUME_CHECK=${RESUME_CHECK:-1}                       # 1: a second launch resumes from the checkpoint (1 step)
EXPERIMENT_NAME=${EXPERIMENT_NAME:-gsm8k_cpu_smoke}
# -----------------------------------------------------------------------------------------------------

cd "$REPO_ROOT"
export PYTHONPATH="$REPO_ROOT${PYTHONPATH:+:$PYTHONPATH}"
log() { echo "[smoke_cpu] $*" >&2; }

log "tiny random Qwen2 model -> $WORK_DIR/model"
"$PYTHON" -c 'import sys; from recipes.cpu_backend.qwen_tokenizer import build_tiny_qwen2_model_dir as build; build(sys.argv[1])' \
  "$WORK_DIR/model"
SOURCE=()
if [ -n "$GSM8K_DIR" ] && [ -d "$GSM8K_DIR" ]; then SOURCE=(--input_dir "$GSM8K_DIR"); fi
"$PYTHON" data_prep/gsm8k.py "${SOURCE[@]}" --train_size "$TRAIN_ROWS" --test_size "$TEST_ROWS" \
  --local_save_dir "$WORK_DIR/data"

# What the CPU stand-ins need in every process of the run (VERL_PLATFORM=cpu, ...), then: no hub, no W&B cloud.
source "$REPO_ROOT/scripts/cpu_env.sh"
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1
export WANDB_MODE=${WANDB_MODE:-offline} WANDB_ERROR_REPORTING=${WANDB_ERROR_REPORTING:-false}
export PROFILE=cpu_smoke MODEL_PATH="$WORK_DIR/model" DATA_DIR="$WORK_DIR/data" OUTPUT_DIR EXPERIMENT_NAME PYTHON

if [ "${DRY_RUN:-0}" = 1 ]; then exec bash scripts/run_gsm8k_grpo.sh "$@"; fi

# trace_spool: what the launcher's trace relay keeps; a stale one would be sent again into this run's traces
rm -rf "$OUTPUT_DIR"/{checkpoints,rollouts,validation,report,logs,hydra,trace_spool,trace_relay.log,trace_relay.url}
mkdir -p "$OUTPUT_DIR/logs"
launch() {  # name, overrides...: one main_ppo through the launcher, its output also in logs/<name>.log
  local name=$1; shift
  log "launch '$name' -> $OUTPUT_DIR/logs/$name.log"
  local start=$SECONDS
  # the rollout servers' evidence (weight checksums, steered turns): one JSON line each (recipes/cpu_backend/server.py)
  CPU_ROLLOUT_EVENTS="$OUTPUT_DIR/logs/$name.rollout_events.jsonl" \
    bash scripts/run_gsm8k_grpo.sh "$@" 2>&1 | tee "$OUTPUT_DIR/logs/$name.log"
  log "launch '$name' took $((SECONDS - start)) s"
}

launch train "$@"
if [ "$RESUME_CHECK" = 1 ]; then
  saved=$(cat "$OUTPUT_DIR/checkpoints/latest_checkpointed_iteration.txt")
  # resume_mode=auto (verl's default) picks up global_step_$saved; one more step, validated at its end
  launch resume "$@" "trainer.total_training_steps=$((saved + 1))" trainer.val_before_train=false
fi

"$PYTHON" scripts/rollout_report.py --rollout_dir "$OUTPUT_DIR/rollouts" --validation_dir "$OUTPUT_DIR/validation" \
  --out "$OUTPUT_DIR/report"
"$PYTHON" scripts/eval_summary.py --validation_dir "$OUTPUT_DIR/validation"
log "ok: logs, dumps, checkpoints and report in $OUTPUT_DIR"
