#!/usr/bin/env bash
# GSM8K test-set accuracy of a base model or a trained (exported) checkpoint, scored by the training reward:
# a validation-only verl run through the same launcher and preflight, then scripts/eval_summary.py on its dump.
#
#   MODEL_PATH=Qwen/Qwen2.5-3B-Instruct bash scripts/eval_gsm8k.sh                 # tools on (TOOL_SET)
#   DATA_DIR=~/data/gsm8k_notools TOOL_SET=none bash scripts/eval_gsm8k.sh        # tools off (data prep --tool_set none)
#   MODEL_PATH=outputs/<exp>/hf VAL_N=8 VAL_TEMPERATURE=1.0 bash scripts/eval_gsm8k.sh   # pass@k from 8 samples
#   DRY_RUN=1 bash scripts/eval_gsm8k.sh                                            # preflight + print only
set -euo pipefail

REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# ---- knobs (the launcher's names; everything else the launcher reads works too) ----------------------
export MODEL_PATH=${MODEL_PATH:-Qwen/Qwen2.5-3B-Instruct}
export DATA_DIR=${DATA_DIR:-$HOME/data/gsm8k}
export TOOL_SET=${TOOL_SET:-calculator}
VAL_N=${VAL_N:-1}                      # samples per question; >1 gives pass@k
VAL_TEMPERATURE=${VAL_TEMPERATURE:-0}  # 0 = greedy (use >0 with VAL_N>1)
PASS_K=${PASS_K:-$VAL_N}
export EXPERIMENT_NAME=${EXPERIMENT_NAME:-eval_$(basename "$MODEL_PATH")_${TOOL_SET}}
export OUTPUT_DIR=${OUTPUT_DIR:-$REPO_ROOT/outputs/$EXPERIMENT_NAME}
export LOGGER=${LOGGER:-console}       # no W&B needed to evaluate
export TRACE=${TRACE:-off}
PYTHON=${PYTHON:-python3}
# -----------------------------------------------------------------------------------------------------
if [ "$VAL_N" -gt 1 ]; then DO_SAMPLE=True; else DO_SAMPLE=False; fi

EVAL_OVERRIDES=(
  "trainer.val_only=True"
  "trainer.val_before_train=True"
  "actor_rollout_ref.rollout.val_kwargs.n=$VAL_N"
  "actor_rollout_ref.rollout.val_kwargs.do_sample=$DO_SAMPLE"
  "actor_rollout_ref.rollout.val_kwargs.temperature=$VAL_TEMPERATURE"
)
SUMMARY=("$PYTHON" "$REPO_ROOT/scripts/eval_summary.py" --validation_dir "$OUTPUT_DIR/validation" --k 1)
if [ "$PASS_K" -gt 1 ]; then SUMMARY+=(--k "$PASS_K"); fi

# the launcher execs verl, so it runs in its own bash process; the summary follows it
bash "$REPO_ROOT/scripts/run_gsm8k_grpo.sh" "${EVAL_OVERRIDES[@]}" "$@"
if [ "${DRY_RUN:-0}" = 1 ]; then
  echo "# then: $(printf '%q ' "${SUMMARY[@]}")"
  exit 0
fi
"${SUMMARY[@]}"
