#!/usr/bin/env bash
# verl's real trainer end to end on a machine with no GPU: verl's main_ppo through the recipe's
# launcher, preflight and config, with PROFILE=cpu_smoke (config/profile/cpu_smoke.yaml: only what the hardware
# forces). A tiny random Qwen2 model (Qwen2.5 tokenizer and chat template, built offline) trains two GRPO steps on a
# few GSM8K rows with multi-turn calculator calls, validates, saves a checkpoint, then a second launch resumes
# from it into a third step; the rollout report and eval summary run on the dumps. Time and RAM: docs/measured.md
# (smoke_cpu_minutes, smoke_cpu_ram_gb). The CPU stand-ins (platform, FSDP2 engine, rollout server) are in
# scripts/harness/cpu_backend. It runs in the project's CPU env (.venv, built on first use; scripts/python_env.sh says
# which Python and why). GSM8K comes from --input_dir / GSM8K_DIR if given, else the hub, else the small GSM8K
# sample in data_prep/gsm8k_sample; the smoke says which. It ends with where the report is, what a pass looks like
# and, last, the validation's RESULT line.
# tests/test_e2e_cpu.py runs it with tracing on against a loopback W&B (one agent-loop worker's weave.init failing).
#
#   bash scripts/smoke_cpu.sh                                # work dir /tmp/gsm8k_cpu_smoke
#   bash scripts/smoke_cpu.sh --input_dir DIR                # GSM8K's {train,test}.jsonl from DIR (as GSM8K_DIR)
#   bash scripts/smoke_cpu.sh trainer.test_freq=1            # hydra overrides go to both launches, last
#   RESUME_CHECK=0 bash scripts/smoke_cpu.sh                 # only the first launch
#   TRACE=on LOGGER=console,wandb bash scripts/smoke_cpu.sh  # any launcher knob passes through
#   NODES=2 bash scripts/smoke_cpu.sh                        # the multi-node path, relays broken mid-run (below)
#
# NODES=2 (or more): a Ray cluster of that many nodes on 127.0.0.1 (scripts/local_ray_cluster.py: a raylet each,
# own temp dir and ports), the smoke submitted to it through the recipe's multi-node path (SUBMIT=ray, one launch, one
# rank and one agent-loop worker per node) with traces on, to WANDB_BASE_URL / WF_TRACE_SERVER_URL or, unset, the W&B
# stand-in (scripts/harness/standins/weave_http_server.py); during training one node's trace relay is SIGKILLed and another's
# SIGSTOPped for STOP_SECONDS (scripts/relay_faults.py, by command line); then the cluster stops. Last line:
# RESULT nodes=<n> traced=<t> acknowledged=<a> lost_traces=<l> duplicate_traces=<d> relays_replaced=<r>
# (scripts/trace_tally.py). Time and figures: docs/measured.md (multinode_*).
. "$(dirname "${BASH_SOURCE[0]}")/help.sh" "$@"  # -h/--help: usage, knobs; runs nothing
set -euo pipefail

REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
. "$REPO_ROOT/scripts/python_env.sh"

# ---- knobs ------------------------------------------------------------------------------------------
PYTHON=${PYTHON:-}                                    # empty: the active venv, else the project's CPU env (.venv)
WORK_DIR=${WORK_DIR:-/tmp/gsm8k_cpu_smoke}            # model, data and (by default) outputs
OUTPUT_DIR=${OUTPUT_DIR:-$WORK_DIR/outputs}           # checkpoints, dumps, logs, report: emptied at the start
                                                      # (only one the smoke made, or a new or empty one)
GSM8K_DIR=${GSM8K_DIR:-}                              # GSM8K's {train,test}.jsonl; empty: the hub, else the sample
TRAIN_ROWS=${TRAIN_ROWS:-6}                           # 3 steps x 2 prompts, no row seen twice
TEST_ROWS=${TEST_ROWS:-4}
RESUME_CHECK=${RESUME_CHECK:-1}                       # 1: a second launch resumes from the checkpoint (1 step)
EXPERIMENT_NAME=${EXPERIMENT_NAME:-gsm8k_cpu_smoke}
NODES=${NODES:-1}                                     # >1: a Ray cluster of NODES nodes on this machine, as above
FAULTS=${FAULTS:-1}                                   # NODES>1: 0 leaves the relays alone
STOP_SECONDS=${STOP_SECONDS:-30}                      # NODES>1: how long one node's relay stays SIGSTOPped
# -----------------------------------------------------------------------------------------------------

ARGS=()  # --input_dir DIR is the smoke's; every other argument is a hydra override for both launches
while [ $# -gt 0 ]; do
  case "$1" in
    --input_dir) [ $# -ge 2 ] || { echo "error: --input_dir needs a folder" >&2; exit 2; }; GSM8K_DIR=$2; shift 2 ;;
    --input_dir=*) GSM8K_DIR=${1#--input_dir=}; shift ;;
    *) ARGS+=("$1"); shift ;;
  esac
done
set -- "${ARGS[@]}"

use_python cpu
cd "$REPO_ROOT"
export PYTHONPATH="$REPO_ROOT:$REPO_ROOT/scripts${PYTHONPATH:+:$PYTHONPATH}"  # scripts/harness: the stand-ins
log() { echo "[smoke_cpu] $*" >&2; }
# Only folders the smoke made (or new or empty ones) are emptied, never a real run's (recipes/folder_guard.py)
guard() { "$PYTHON" -m recipes.folder_guard "$1" --made-by smoke_cpu --knob "$2" "$3" || exit 1; }
guard claim WORK_DIR "$WORK_DIR"
if [ "${DRY_RUN:-0}" = 1 ]; then guard check OUTPUT_DIR "$OUTPUT_DIR"; else guard clear OUTPUT_DIR "$OUTPUT_DIR"; fi
if [ "$NODES" -gt 1 ]; then  # each node's relay keeps its traces there; a stale spool would be sent again
  export TRACE_SPOOL=${TRACE_SPOOL:-$WORK_DIR/trace_spool}
  guard clear TRACE_SPOOL "$TRACE_SPOOL"
fi

log "tiny random Qwen2 model -> $WORK_DIR/model"
"$PYTHON" -c 'import sys; from harness.qwen_tokenizer import build_tiny_qwen2_model_dir as build; build(sys.argv[1])' \
  "$WORK_DIR/model"
SOURCE=(--fallback_sample)  # given a folder, that folder or an error: never another source in its place
if [ -n "$GSM8K_DIR" ]; then SOURCE=(--input_dir "$GSM8K_DIR"); fi
PREP=$("$PYTHON" data_prep/gsm8k.py "${SOURCE[@]}" --train_size "$TRAIN_ROWS" --test_size "$TEST_ROWS" \
  --local_save_dir "$WORK_DIR/data") || exit 1
echo "$PREP" >&2
GSM8K_SOURCE=$(sed -n 's/^\[data_prep\] source: //p' <<<"$PREP")

# What the CPU stand-ins need in every process of the run (VERL_PLATFORM=cpu, ...), then: no hub, no W&B cloud.
source "$REPO_ROOT/scripts/cpu_env.sh"
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1
export WANDB_MODE=${WANDB_MODE:-offline} WANDB_ERROR_REPORTING=${WANDB_ERROR_REPORTING:-false}
export PROFILE=cpu_smoke MODEL_PATH="$WORK_DIR/model" DATA_DIR="$WORK_DIR/data" OUTPUT_DIR EXPERIMENT_NAME PYTHON

if [ "${DRY_RUN:-0}" = 1 ]; then exec bash scripts/run_gsm8k_grpo.sh "$@"; fi

multinode() {  # NODES>1: see the header
  export TRACE=${TRACE:-on} NNODES=$NODES N_GPUS_PER_NODE=1  # OUTPUT_DIR and TRACE_SPOOL emptied above
  mkdir -p "$OUTPUT_DIR/logs"
  local cluster_dir=$WORK_DIR/cluster standin=0 faults=0
  cleanup() {
    [ "$faults" = 0 ] || kill "$faults" 2>/dev/null || true
    [ "$standin" = 0 ] || kill "$standin" 2>/dev/null || true
    [ ! -f "$cluster_dir/cluster.json" ] || "$PYTHON" scripts/local_ray_cluster.py stop --dir "$cluster_dir" >&2 || true
  }
  trap cleanup EXIT
  if [ -z "${WANDB_BASE_URL:-}" ]; then  # the benchmark's own W&B: the stand-in, on 127.0.0.1
    rm -f "$WORK_DIR/wandb.url"
    "$PYTHON" -m harness.standins.weave_http_server --url-file "$WORK_DIR/wandb.url" \
      >"$OUTPUT_DIR/logs/wandb_standin.log" 2>&1 &
    standin=$!
    for _ in $(seq 1800); do [ -s "$WORK_DIR/wandb.url" ] && break; sleep 0.1; done  # it imports weave
    WANDB_BASE_URL=$(cat "$WORK_DIR/wandb.url")
    export WANDB_BASE_URL WF_TRACE_SERVER_URL=$WANDB_BASE_URL/traces WANDB_ENTITY=${WANDB_ENTITY:-loopback-entity}
    export WANDB_API_KEY=${WANDB_API_KEY:-$("$PYTHON" -c 'from harness.standins.weave_http_server import API_KEY; print(API_KEY)')}
  fi
  export WEAVE_USE_SERVER_CACHE=false WEAVE_PRINT_CALL_LINK=false
  log "a Ray cluster of $NODES nodes on 127.0.0.1 -> $cluster_dir (traces to $WANDB_BASE_URL)"
  local state dashboard
  state=$("$PYTHON" scripts/local_ray_cluster.py start --dir "$cluster_dir" --nodes "$NODES" --cpus 8 --gpus 1)
  dashboard=$("$PYTHON" -c 'import json, sys; print(json.loads(sys.argv[1])["dashboard"])' "$state")
  eval "$("$PYTHON" -c 'import json, shlex, sys; [print(f"export {k}={shlex.quote(v)}") for k, v in json.loads(sys.argv[1])["env"].items()]' "$state")"
  if [ "$FAULTS" = 1 ]; then  # from outside, by command line, once step 1 is done
    "$PYTHON" scripts/relay_faults.py inject --spool-base "$TRACE_SPOOL" --kill 1 --stop 1 \
      --stop-seconds "$STOP_SECONDS" --when-exists "$OUTPUT_DIR/rollouts/1.jsonl" \
      >"$OUTPUT_DIR/logs/relay_faults.json" 2>"$OUTPUT_DIR/logs/relay_faults.log" &
    faults=$!
  fi
  log "submitting the smoke to it (SUBMIT=ray) -> $OUTPUT_DIR/logs/train.log"
  local start=$SECONDS
  SUBMIT=ray RAY_ADDRESS=$dashboard bash scripts/run_gsm8k_grpo.sh "$@" 2>&1 | tee "$OUTPUT_DIR/logs/train.log" >&2
  log "the job took $((SECONDS - start)) s"
  if [ "$faults" != 0 ]; then
    wait "$faults" || log "warning: the relay faults were not all injected (logs/relay_faults.log)"
    faults=0
    log "relay faults: $(cat "$OUTPUT_DIR/logs/relay_faults.json")"
  fi
  log "agent-loop workers: $(grep -o 'agent-loop worker pid [0-9]* on node [0-9a-f]*' "$OUTPUT_DIR/logs/train.log" | sort -u | xargs)"
  local result status=0
  result=$("$PYTHON" scripts/trace_tally.py --output_dir "$OUTPUT_DIR" --wandb "$WANDB_BASE_URL" --nodes "$NODES" \
    --save "$OUTPUT_DIR/logs/wandb_received.json") || status=$?
  cleanup >&2
  trap - EXIT
  echo "$result" | tail -n 1
  return "$status"
}
if [ "$NODES" -gt 1 ]; then multinode "$@"; exit; fi

# OUTPUT_DIR was emptied above: no stale trace_spool (what the launcher's relay keeps) is sent again
mkdir -p "$OUTPUT_DIR/logs"
launch() {  # name, overrides...: one main_ppo through the launcher, its output also in logs/<name>.log
  local name=$1; shift
  log "launch '$name' -> $OUTPUT_DIR/logs/$name.log"
  local start=$SECONDS
  # the rollout servers' evidence (weight checksums, steered turns): one JSON line each (scripts/harness/cpu_backend/server.py)
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

"$PYTHON" -m recipes.results.rollout_report --rollout_dir "$OUTPUT_DIR/rollouts" \
  --validation_dir "$OUTPUT_DIR/validation" --out "$OUTPUT_DIR/report"
SUMMARY=$("$PYTHON" -m recipes.results.summary --validation_dir "$OUTPUT_DIR/validation")
grep -v '^RESULT ' <<<"$SUMMARY" || true
steps=$(cat "$OUTPUT_DIR/checkpoints/latest_checkpointed_iteration.txt")
if [ "$RESUME_CHECK" = 1 ]; then
  [ "$steps" = $((saved + 1)) ] || { log "FAIL: the resumed launch did not checkpoint step $((saved + 1))"; exit 1; }
  resumed="steps 1-$saved trained, then step $steps resumed from the step-$saved checkpoint"
else
  resumed="steps 1-$steps trained (RESUME_CHECK=0: no resume)"
fi
log "GSM8K: $GSM8K_SOURCE"
log "report: $OUTPUT_DIR/report/report.md (logs, dumps and checkpoints: $OUTPUT_DIR)"
log "passed: $resumed. A pass is exit status 0 and the RESULT line below; a random model's accuracies are ~0," \
    "that is expected (the tool-call rate comes from the stand-in server's steering)"
grep '^RESULT ' <<<"$SUMMARY"
