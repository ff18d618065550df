#!/usr/bin/env bash
# GSM8K test-set accuracy of a base model or a trained (exported) checkpoint, scored by the training reward:
# a validation-only verl run through the same launcher and preflight, then gsm8k-eval-summary on its dump.
#
#   MODEL_PATH=Qwen/Qwen2.5-3B-Instruct bash scripts/eval_gsm8k.sh                 # tools on (TOOL_SET)
#   DATA_DIR=~/data/gsm8k_notools TOOL_SET=none bash scripts/eval_gsm8k.sh        # tools off (data prep --tool_set none)
#   MODEL_PATH=outputs/<exp>/hf VAL_N=8 VAL_TEMPERATURE=1.0 bash scripts/eval_gsm8k.sh   # pass@k from 8 samples
#   DRY_RUN=1 bash scripts/eval_gsm8k.sh                                            # preflight + print only
#   DEVICE=cpu MODEL_PATH=outputs/<exp>/hf bash scripts/eval_gsm8k.sh   # no GPU: scripts/harness/cpu_backend, PROFILE=cpu_smoke
#   LOGGER=console,wandb bash scripts/eval_gsm8k.sh    # also publish the result as a Weave Evaluation (PUBLISH=1 too)
#
# The launcher's knobs (PROFILE, MODEL_PATH, DATA_DIR, TOOL_SET, OUTPUT_DIR, ...) pass through with the
# launcher's own defaults; only what evaluation changes is set here.
HELP_KNOBS_OF=run_gsm8k_grpo.sh . "$(dirname "${BASH_SOURCE[0]}")/help.sh" "$@"  # -h/--help: usage, knobs; runs nothing
set -euo pipefail

REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
. "$REPO_ROOT/scripts/python_env.sh"
# ---- knobs (evaluation's own) ------------------------------------------------------------------------
DEVICE=${DEVICE:-gpu}                  # gpu | cpu: verl on scripts/harness/cpu_backend's CPU stand-ins (small models only)
VAL_N=${VAL_N:-1}                      # samples per question; >1 gives pass@k (needs VAL_TEMPERATURE > 0)
VAL_TEMPERATURE=${VAL_TEMPERATURE:-0}  # 0 = greedy
PASS_K=${PASS_K:-$VAL_N}
EXPERIMENT_NAME=${EXPERIMENT_NAME:-}   # empty: eval_<model>_<TOOL_SET>[_n<VAL_N>_t<VAL_TEMPERATURE>], <model> being
                                       # <experiment>_step<N> for an export (its exported_from.json), else the
                                       # model's folder or hub name; it names OUTPUT_DIR and the Weave Evaluation
OVERWRITE=${OVERWRITE:-0}              # 1: replace an earlier evaluation in OUTPUT_DIR (refused otherwise, and
                                       # for a validation folder no evaluation made, e.g. a training run's)
export LOGGER=${LOGGER:-console}       # no W&B needed to evaluate
export TRACE=${TRACE:-off}
PROFILE=${PROFILE:-}                   # empty: the launcher's (8xh100), with DEVICE=cpu cpu_smoke
PUBLISH=${PUBLISH:-auto}               # Weave Evaluation of the result: auto (= when LOGGER has wandb) | 1 | 0
PYTHON=${PYTHON:-}                     # empty: the active venv, else the project's env (DEVICE=cpu: .venv;
                                       # gpu: .venv-gpu, else .venv)
# -----------------------------------------------------------------------------------------------------
EVAL_OVERRIDES=()
case "$DEVICE" in
  gpu)
    use_python auto
    # as many GPUs as this node shows (CUDA_VISIBLE_DEVICES, else nvidia-smi), not the profile's 8; N_GPUS_PER_NODE wins
    if [ -z "${N_GPUS_PER_NODE:-}" ]; then
      if [ -n "${CUDA_VISIBLE_DEVICES:-}" ]; then
        N_GPUS_PER_NODE=$(tr ',' '\n' <<<"$CUDA_VISIBLE_DEVICES" | grep -c .)
      elif command -v nvidia-smi >/dev/null; then
        N_GPUS_PER_NODE=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
      fi
      if [ "${N_GPUS_PER_NODE:-0}" -gt 0 ]; then export N_GPUS_PER_NODE; else unset N_GPUS_PER_NODE; fi
    fi ;;
  cpu)  # the CPU platform, engine and Hugging Face rollout server; a CPU profile (cpu_smoke or cpu_learn) sizes them
    use_python cpu
    export PROFILE=${PROFILE:-cpu_smoke}
    source "$REPO_ROOT/scripts/cpu_env.sh"
    # the CPU rollout server writes some first turns itself when steering (the smoke's trainer needs it): never
    # in an evaluation, whatever the profile says
    EVAL_OVERRIDES+=("++actor_rollout_ref.rollout.engine_kwargs.hf_cpu.steer_every=0") ;;
  *) echo "error: DEVICE must be gpu or cpu, not '$DEVICE'" >&2; exit 1 ;;
esac
# verl's agent loop samples at val_kwargs.temperature whatever do_sample says: at 0 all n samples are the same
if [ "$VAL_N" -gt 1 ] && awk "BEGIN {exit !($VAL_TEMPERATURE <= 0)}"; then
  echo "error: VAL_N=$VAL_N samples at VAL_TEMPERATURE=$VAL_TEMPERATURE would all be identical (greedy); set VAL_TEMPERATURE=1.0" >&2
  exit 1
fi
if [ -z "$EXPERIMENT_NAME" ]; then
  EXPERIMENT_NAME=$(PYTHONPATH="$REPO_ROOT${PYTHONPATH:+:$PYTHONPATH}" "$PYTHON" -m recipes.export.provenance \
    eval-name "${MODEL_PATH:-}" "${TOOL_SET:-default_tools}" "$VAL_N" "$VAL_TEMPERATURE")
fi
export EXPERIMENT_NAME
OUTPUT_DIR=$(PRINT_OUTPUT_DIR=1 bash "$REPO_ROOT/scripts/run_gsm8k_grpo.sh")
VALIDATION_DIR=$OUTPUT_DIR/validation
[[ $VALIDATION_DIR == /* ]] || VALIDATION_DIR=$REPO_ROOT/$VALIDATION_DIR  # main_ppo runs in the repo
# OVERWRITE=1 empties only a folder an evaluation made, never a training run's dumps (recipes/folder_guard.py)
guard() { PYTHONPATH="$REPO_ROOT${PYTHONPATH:+:$PYTHONPATH}" "$PYTHON" -m recipes.folder_guard "$1" \
            --made-by eval_gsm8k --knob OUTPUT_DIR/validation "$VALIDATION_DIR"; }
# verl dumps an evaluation as step 0 of OUTPUT_DIR/validation: a second one there would silently replace the first
if compgen -G "$VALIDATION_DIR/*.jsonl" >/dev/null; then
  if [ "$OVERWRITE" != 1 ]; then
    echo "error: $VALIDATION_DIR already holds an evaluation, which this one ($EXPERIMENT_NAME) would" \
         "replace; set EXPERIMENT_NAME (or OUTPUT_DIR) to keep both, or OVERWRITE=1 to replace it" >&2
    exit 1
  fi
  guard check || exit 1
  if [ "${DRY_RUN:-0}" = 1 ]; then
    echo "# OVERWRITE=1: the evaluation would first remove the earlier one in $VALIDATION_DIR"
  else
    guard clear || exit 1  # nothing of the earlier evaluation mixes into this one's summary
  fi
elif [ "${DRY_RUN:-0}" != 1 ]; then
  guard claim 2>/dev/null || true  # marked as an evaluation's, so that OVERWRITE=1 may empty it next time
fi

EVAL_OVERRIDES+=(
  "trainer.val_only=True"
  "trainer.val_before_train=True"
  "actor_rollout_ref.actor.use_kl_loss=False"  # nothing is trained: no reference model to build and hold
  "actor_rollout_ref.rollout.val_kwargs.n=$VAL_N"
  "actor_rollout_ref.rollout.val_kwargs.temperature=$VAL_TEMPERATURE"
)
SUMMARY=("$PYTHON" -m recipes.results.summary --validation_dir "$OUTPUT_DIR/validation" --k 1)
PUBLISH_CMD=("$PYTHON" -m recipes.results.publish --validation_dir "$OUTPUT_DIR/validation"
             --experiment "$EXPERIMENT_NAME" --model_name "$EXPERIMENT_NAME" --k 1)  # its step 0 is no training step
if [ "$PASS_K" -gt 1 ]; then SUMMARY+=(--k "$PASS_K"); PUBLISH_CMD+=(--k "$PASS_K"); fi
if [ -n "${MODEL_PATH:-}" ]; then PUBLISH_CMD+=(--model_path "$MODEL_PATH"); fi
if [ -n "${TOOL_SET:-}" ]; then PUBLISH_CMD+=(--tool_set "$TOOL_SET"); fi
if [ -n "${PROJECT_NAME:-}" ]; then PUBLISH_CMD+=(--project "$PROJECT_NAME"); fi
case "$PUBLISH" in
  1) PUBLISH_NOTE="" ;;
  auto) if [[ ",$LOGGER," == *",wandb,"* ]]; then
          PUBLISH_NOTE=""; PUBLISH_CMD+=(--skip_without_credentials)  # W&B logging on but no key: say so, go on
        else
          PUBLISH_NOTE="not publishing to Weave (LOGGER=$LOGGER has no wandb; PUBLISH=1 to publish)"
        fi ;;
  0) PUBLISH_NOTE="not publishing to Weave (PUBLISH=0)" ;;
  *) echo "error: PUBLISH must be auto, 1 or 0, not '$PUBLISH'" >&2; exit 1 ;;
esac

# the launcher execs verl, so it runs in its own bash process; the summary follows it. Its own
# publish-while-training watcher stays off: publishing happens once, below, from one process.
PUBLISH_EVALS=0 bash "$REPO_ROOT/scripts/run_gsm8k_grpo.sh" "${EVAL_OVERRIDES[@]}" "$@"
if [ "${DRY_RUN:-0}" = 1 ]; then
  echo "# then: $(printf '%q ' "${SUMMARY[@]}")"
  if [ -n "$PUBLISH_NOTE" ]; then echo "# $PUBLISH_NOTE"; else echo "# then: $(printf '%q ' "${PUBLISH_CMD[@]}")"; fi
  exit 0
fi
"${SUMMARY[@]}"
if [ -n "$PUBLISH_NOTE" ]; then
  echo "[eval] $PUBLISH_NOTE"
elif [ "$PUBLISH" = 1 ]; then
  "${PUBLISH_CMD[@]}"  # asked for explicitly: a failure fails the eval
else
  "${PUBLISH_CMD[@]}" || echo "[eval] warning: publishing to Weave failed (see above); the result is in $OUTPUT_DIR/validation/summary.json" >&2
fi
