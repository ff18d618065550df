#!/usr/bin/env bash
# Multi-turn tool-using GRPO on GSM8K with verl 0.9.1: async SGLang rollouts, Weave traces.
#
#   python data_prep/gsm8k.py && bash scripts/run_gsm8k_grpo.sh           # 8xH100, the recipe's defaults
#   PROFILE=4gpu bash scripts/run_gsm8k_grpo.sh                           # config/profile/*.yaml
#   DRY_RUN=1 bash scripts/run_gsm8k_grpo.sh                              # preflight + the plan, start nothing
#   CHECK_ONLY=1 bash scripts/run_gsm8k_grpo.sh                           # check this GPU node, start nothing
#   bash scripts/run_gsm8k_grpo.sh trainer.total_epochs=1                 # hydra overrides go last and win
#
# The knobs below are what differs per machine or run; every other setting lives once, in
# config/gsm8k_multiturn_grpo.yaml or a profile, and is changed with a hydra override. A preflight
# (scripts/preflight.py) runs first and stops the launch, before any GPU work, on anything that would fail
# or silently do nothing.
. "$(dirname "${BASH_SOURCE[0]}")/help.sh" "$@"  # -h/--help: usage, knobs; runs nothing
set -euo pipefail

REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

# ---- knobs ------------------------------------------------------------------------------------------
PROFILE=${PROFILE:-8xh100}                       # config/profile/<PROFILE>.yaml
DATA_DIR=${DATA_DIR:-$HOME/data/gsm8k}           # where python data_prep/gsm8k.py writes
TOOL_SET=${TOOL_SET:-calculator}                 # calculator | calc_gsm8k_reward | both | none (as in the data prep)
MODEL_PATH=${MODEL_PATH:-}                       # empty: the profile's model
N_GPUS_PER_NODE=${N_GPUS_PER_NODE:-}             # empty: the profile's
NNODES=${NNODES:-}                               # empty: the profile's
TRACE=${TRACE:-}                                 # on | off; empty: the profile's (on, except smoke tests)
LOGGER=${LOGGER:-}                               # e.g. console or console,wandb; empty: the profile's
EXPERIMENT_NAME=${EXPERIMENT_NAME:-gsm8k_${TOOL_SET}_${PROFILE}}
OUTPUT_DIR=${OUTPUT_DIR:-$REPO_ROOT/outputs/$EXPERIMENT_NAME}  # checkpoints, dumps; multi-node: shared storage
PUBLISH_EVALS=${PUBLISH_EVALS:-0}                # 1: publish each validation to Weave as an Evaluation while training
TRACE_RELAY=${TRACE_RELAY:-auto}                 # auto: traces go through a relay on this node that keeps them on disk
                                                 # until W&B has them; offline: air-gapped, keep them for
                                                 # scripts/upload_traces.py; off: workers send straight to W&B
PYTHON=${PYTHON:-python3}
DRY_RUN=${DRY_RUN:-0}                            # 1: preflight, print the plan, write the composed config; start nothing
DRY_RUN_CONFIG=${DRY_RUN_CONFIG:-}               # where DRY_RUN writes the config; empty: a new file in $TMPDIR
SUBMIT=${SUBMIT:-}                               # ray: submit as a Ray job to RAY_ADDRESS (submit_multinode.sh)
CHECK_ONLY=${CHECK_ONLY:-0}                      # 1: the launch preflight, a line per GPU-node check; start nothing
# -----------------------------------------------------------------------------------------------------

if [ "${PRINT_OUTPUT_DIR:-0}" = 1 ]; then echo "$OUTPUT_DIR"; exit 0; fi  # for scripts/eval_gsm8k.sh
if [ ! -f "$REPO_ROOT/config/profile/$PROFILE.yaml" ]; then
  echo "error: unknown PROFILE=$PROFILE; choose one of: $(cd "$REPO_ROOT/config/profile" && ls ./*.yaml | sed 's|./||; s|\.yaml||' | xargs)" >&2
  exit 1
fi
if [ "$TOOL_SET" != none ] && [ ! -f "$REPO_ROOT/config/tool_config/$TOOL_SET.yaml" ]; then
  echo "error: unknown TOOL_SET=$TOOL_SET; choose one of: $(cd "$REPO_ROOT/config/tool_config" && ls ./*.yaml | sed 's|./||; s|\.yaml||' | xargs) none" >&2
  exit 1
fi
# A Ray job runs in Ray's unpacked copy of the repo on every node: give it repo-relative paths.
if [ "$SUBMIT" = ray ]; then ROOT=.; else ROOT=$REPO_ROOT; fi
if [ "$TOOL_SET" = none ]; then TOOL_CONFIG=null; else TOOL_CONFIG=$ROOT/config/tool_config/$TOOL_SET.yaml; fi

OVERRIDES=(
  "profile=$PROFILE"
  "data.train_files=$DATA_DIR/train.parquet"
  "data.val_files=$DATA_DIR/test.parquet"
  "actor_rollout_ref.rollout.multi_turn.tool_config_path=$TOOL_CONFIG"
  "actor_rollout_ref.rollout.agent.agent_loop_config_path=$ROOT/config/agent_loop.yaml"
  "reward.custom_reward_function.path=$ROOT/recipes/reward.py"
  "trainer.experiment_name=$EXPERIMENT_NAME"
  "trainer.default_local_dir=$OUTPUT_DIR/checkpoints"
  "trainer.rollout_data_dir=$OUTPUT_DIR/rollouts"
  "trainer.validation_data_dir=$OUTPUT_DIR/validation"
  "hydra.run.dir=$OUTPUT_DIR/hydra/\${now:%Y-%m-%d_%H-%M-%S}"  # hydra's log and composed config, not ./outputs/
)
[ -z "$MODEL_PATH" ] || OVERRIDES+=("actor_rollout_ref.model.path=$MODEL_PATH")
[ -z "$N_GPUS_PER_NODE" ] || OVERRIDES+=("trainer.n_gpus_per_node=$N_GPUS_PER_NODE")
[ -z "$NNODES" ] || OVERRIDES+=("trainer.nnodes=$NNODES")
[ -z "$LOGGER" ] || OVERRIDES+=("trainer.logger=[$LOGGER]")
export TRACE_RELAY  # the preflight asks for no W&B key for traces kept offline
case "$TRACE_RELAY" in
  auto|off) ;;
  offline) [ -n "${WANDB_ENTITY:-}" ] || { echo "error: TRACE_RELAY=offline needs WANDB_ENTITY=<the W&B entity the traces will be uploaded to>" >&2; exit 1; } ;;
  *) echo "error: TRACE_RELAY must be auto, off or offline, not '$TRACE_RELAY'" >&2; exit 1 ;;
esac
case "$TRACE" in
  "") ;;
  on) OVERRIDES+=("actor_rollout_ref.rollout.trace.backend=weave") ;;
  off) OVERRIDES+=("actor_rollout_ref.rollout.trace.backend=null") ;;
  *) echo "error: TRACE must be on or off, not '$TRACE'" >&2; exit 1 ;;
esac

# A Ray job's entrypoint (recipes/launch/ray_job.py) is this script again, with every knob already resolved
# into the arguments by the submitting launcher: nothing is looked up twice.
if [ "${RECIPE_RESOLVED:-0}" = 1 ]; then OVERRIDES=(); fi

CMD=("$PYTHON" -m verl.trainer.main_ppo --config-path="$REPO_ROOT/config" --config-name=gsm8k_multiturn_grpo
     "${OVERRIDES[@]}" "$@")

cd "$REPO_ROOT"  # Ray puts the driver's cwd on every local worker's sys.path: our tools and recipes import there
export PYTHONPATH="$REPO_ROOT${PYTHONPATH:+:$PYTHONPATH}"

# The trace relay (recipes/trace_relay) listens on this node's loopback. The agent-loop workers get its URL from
# this shell's environment, through the local Ray cluster main_ppo starts. A Ray job's workers inherit each
# node's raylet environment instead: they send straight to W&B, flushed after every step (recipes/tracing.py).
RELAY_MODE=$TRACE_RELAY  # off | auto | offline, as this launch will run it (if the config traces)
if [ "$SUBMIT" = ray ] || [ "${RECIPE_RESOLVED:-0}" = 1 ]; then RELAY_MODE=off; fi
SPOOL_DIR=$OUTPUT_DIR/trace_spool
TRACE_STATE=$(mktemp)  # the preflight writes whether the composed config traces: weave | off
trap 'rm -f "$TRACE_STATE"' EXIT
# it also prints, once, where the traces can be opened (the workers print no link per call)
PREFLIGHT=("$PYTHON" "$REPO_ROOT/scripts/preflight.py" --trace-backend-to "$TRACE_STATE"
           --trace-route "$RELAY_MODE" --trace-spool "$SPOOL_DIR")
# A Ray job reruns this script on the cluster: the knobs used below (not hydra settings) go with it as resolved here.
JOB_KNOBS=(PROFILE TOOL_SET EXPERIMENT_NAME OUTPUT_DIR PUBLISH_EVALS MODEL_PATH)
SUBMIT_CMD=("$PYTHON" -m recipes.launch.ray_job)
for knob in "${JOB_KNOBS[@]}"; do SUBMIT_CMD+=(--knob "$knob=${!knob}"); done
SUBMIT_CMD+=(-- "${OVERRIDES[@]}" "$@")
# Beside training, never in its way: publishes each validation dump as it lands, exits after main_ppo (which
# keeps this shell's PID through exec; with a trace relay this shell waits for it) does; failures go to its log.
WATCHER=("$PYTHON" "$REPO_ROOT/scripts/publish_evals.py" --validation_dir "$OUTPUT_DIR/validation"
         --experiment "$EXPERIMENT_NAME" --tool_set "$TOOL_SET" --watch --stop_when_pid_exits $$)
[ -z "$MODEL_PATH" ] || WATCHER+=(--model_path "$MODEL_PATH")
RELAY=()
plan_relay() {  # after the preflight, which said whether the composed config traces
  local traces; traces=$(cat "$TRACE_STATE"); rm -f "$TRACE_STATE"  # gone before any exec (no EXIT trap then)
  if [ "$RELAY_MODE" = off ] || [ "$traces" != weave ]; then return; fi
  RELAY=("$PYTHON" -m recipes.trace_relay serve --spool "$SPOOL_DIR" --url-file "$OUTPUT_DIR/trace_relay.url")
  if [ "$TRACE_RELAY" = offline ]; then RELAY+=(--offline --entity "$WANDB_ENTITY"); fi
}
if [ "$TRACE_RELAY" = offline ] && { [ "$SUBMIT" = ray ] || [ "${RECIPE_RESOLVED:-0}" = 1 ]; }; then
  echo "error: TRACE_RELAY=offline runs on one node only: workers on other nodes cannot reach its relay" >&2; exit 1
fi
# ---- node check (CHECK_ONLY=1): every launch check with a line per GPU-node check, in Python; starts nothing ----
if [ "$CHECK_ONLY" = 1 ]; then
  "$PYTHON" "$REPO_ROOT/scripts/preflight.py" --node-check -- "${OVERRIDES[@]}" "$@"
  exit 0  # reached only when it passed (set -e: a failed check exits with its status)
fi
if [ "$DRY_RUN" = 1 ]; then
  CONFIG_FILE=${DRY_RUN_CONFIG:-$(mktemp --suffix=.yaml "${TMPDIR:-/tmp}/${EXPERIMENT_NAME}_config.XXXXXX")}
  PLAN=$("${PREFLIGHT[@]}" --print-plan --write-config "$CONFIG_FILE" -- "${OVERRIDES[@]}" "$@") ||
    { [ -n "$DRY_RUN_CONFIG" ] || rm -f "$CONFIG_FILE"; exit 1; }
  plan_relay
  echo "# DRY_RUN=1: preflight passed, nothing started; the launch would run (profile $PROFILE${SUBMIT:+, submitted as a Ray job}):"
  echo "$PLAN"
  if [ "$SUBMIT" = ray ]; then printf '%q ' "${SUBMIT_CMD[@]}"; echo; echo "# which runs on the cluster:"; fi
  if [ "$PUBLISH_EVALS" = 1 ]; then echo "# and beside it: $(printf '%q ' "${WATCHER[@]}")"; fi
  if [ ${#RELAY[@]} -gt 0 ]; then echo "# traces through the relay: $(printf '%q ' "${RELAY[@]}")"; fi
  printf '%q ' "${CMD[@]}"; echo
  exit 0
fi
if [ "$SUBMIT" = ray ]; then
  # Checked here (no GPUs needed on the submitting machine), then run on the cluster from Ray's copy of the repo.
  "${PREFLIGHT[@]}" --submit -- "${OVERRIDES[@]}" "$@"
  rm -f "$TRACE_STATE"
  exec "${SUBMIT_CMD[@]}"
fi
"${PREFLIGHT[@]}" --launch -- "${OVERRIDES[@]}" "$@"
plan_relay

start_watcher() {
  if [ "$PUBLISH_EVALS" != 1 ]; then return; fi
  mkdir -p "$OUTPUT_DIR"
  nohup "${WATCHER[@]}" >>"$OUTPUT_DIR/publish_evals.log" 2>&1 &
  echo "[launch] publishing each validation to Weave in the background (log: $OUTPUT_DIR/publish_evals.log)" >&2
}
ulimit -n 65535 2>/dev/null || echo "warning: could not raise the open-files limit (ulimit -n 65535); Ray may run out" >&2
if [ ${#RELAY[@]} -eq 0 ]; then
  start_watcher
  exec "${CMD[@]}"
fi

# With a relay, main_ppo runs as a child: the relay outlives it to send (or keep) what the workers traced.
# RELAY_PID is its supervisor (recipes/trace_relay/supervisor.py): it holds the relay's address for the whole run
# and starts a relay that dies again there (the log says why); SIGTERM stops it, with no restart.
mkdir -p "$OUTPUT_DIR"
rm -f "$OUTPUT_DIR/trace_relay.url"
"${RELAY[@]}" >>"$OUTPUT_DIR/trace_relay.log" 2>&1 &
RELAY_PID=$!
trap 'kill -TERM "$RELAY_PID" 2>/dev/null; exit 130' INT TERM  # stopped while it starts: leave nothing behind
for _ in $(seq 600); do  # up to 60 s: it imports weave, then writes its URL
  if [ -s "$OUTPUT_DIR/trace_relay.url" ] || ! kill -0 "$RELAY_PID" 2>/dev/null; then break; fi
  sleep 0.1
done
if [ ! -s "$OUTPUT_DIR/trace_relay.url" ]; then
  kill "$RELAY_PID" 2>/dev/null || true
  echo "error: the trace relay did not start (log: $OUTPUT_DIR/trace_relay.log):" >&2
  tail -n 3 "$OUTPUT_DIR/trace_relay.log" >&2
  echo "TRACE_RELAY=off sends traces straight to W&B instead; nothing was started" >&2
  exit 1
fi
GSM8K_RECIPE_TRACE_RELAY=$(cat "$OUTPUT_DIR/trace_relay.url")
export GSM8K_RECIPE_TRACE_RELAY
echo "[launch] Weave traces go through the trace relay $GSM8K_RECIPE_TRACE_RELAY (spool $SPOOL_DIR," \
     "log $OUTPUT_DIR/trace_relay.log)" >&2
start_watcher

# A script's background job ignores SIGINT: Ctrl-C and SIGTERM reach main_ppo as SIGTERM (Ray's driver exits
# cleanly on it); then the relay drains and says what it sent and what is left.
"${CMD[@]}" &
TRAIN_PID=$!
trap 'kill -TERM "$TRAIN_PID" 2>/dev/null || true' INT TERM
while kill -0 "$TRAIN_PID" 2>/dev/null; do wait "$TRAIN_PID" || true; done  # a trapped signal interrupts `wait`
status=0
wait "$TRAIN_PID" || status=$?  # main_ppo's own exit status (bash keeps it)
trap - INT TERM
kill -TERM "$RELAY_PID" 2>/dev/null || true
relay_status=0
wait "$RELAY_PID" || relay_status=$?
# its one-line summary: what was sent, what is pending, and the upload command when something is
grep -h "^trace relay stopped:" "$OUTPUT_DIR/trace_relay.log" | tail -n 1 >&2 || true
if [ "$relay_status" != 0 ] && [ "$relay_status" != 3 ]; then  # 3: records pending, said in the summary
  echo "[launch] the trace relay exited with status $relay_status (log: $OUTPUT_DIR/trace_relay.log); what it" \
       "kept is sent by: python scripts/upload_traces.py --spool $SPOOL_DIR" >&2
fi
exit "$status"
