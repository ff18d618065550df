#!/usr/bin/env bash
# Multi-turn tool-using GRPO on GSM8K with verl 0.9.1: async SGLang rollouts, Weave traces.
#
#   python data_prep/gsm8k.py && bash scripts/run_gsm8k_grpo.sh           # 8xH100, the recipe's defaults
#   PROFILE=4gpu bash scripts/run_gsm8k_grpo.sh                           # config/profile/*.yaml
#   DRY_RUN=1 bash scripts/run_gsm8k_grpo.sh                              # preflight + the plan, start nothing
#   CHECK_ONLY=1 bash scripts/run_gsm8k_grpo.sh                           # check this GPU node, start nothing
#   bash scripts/run_gsm8k_grpo.sh trainer.total_epochs=1                 # hydra overrides go last and win
#
# The knobs below are what differs per machine or run, with their defaults (their one home: the launcher reads
# them from here); every other setting lives once, in config/gsm8k_multiturn_grpo.yaml or a profile, and is
# changed with a hydra override. The launcher itself is
# `python -m recipes.launch` (recipes/launch/): it maps the knobs to hydra overrides, runs the preflight (which stops
# the launch, before any GPU work, on anything that would fail or silently do nothing), then main_ppo with a trace
# relay on every node and, if asked, the evaluation watcher beside it.
. "$(dirname "${BASH_SOURCE[0]}")/help.sh" "$@"  # -h/--help: usage, knobs; runs nothing
set -euo pipefail

REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
. "$REPO_ROOT/scripts/python_env.sh"

# ---- knobs ------------------------------------------------------------------------------------------
PROFILE=${PROFILE:-8xh100}                       # config/profile/<PROFILE>.yaml
DATA_DIR=${DATA_DIR:-$HOME/data/gsm8k}           # where python data_prep/gsm8k.py writes
TOOL_SET=${TOOL_SET:-calculator}                 # config/tool_config/<TOOL_SET>.yaml, or none (as in the data prep)
MODEL_PATH=${MODEL_PATH:-}                       # empty: the profile's model
N_GPUS_PER_NODE=${N_GPUS_PER_NODE:-}             # empty: the profile's
NNODES=${NNODES:-}                               # empty: the profile's
GPU_MEMORY_GB=${GPU_MEMORY_GB:-}                 # the memory plan's GPU where nvidia-smi does not answer (planning
                                                 # for another node); empty: 80
TRACE=${TRACE:-}                                 # on | off; empty: the profile's (on, except smoke tests)
TRACE_GB_PER_DAY=${TRACE_GB_PER_DAY:-}           # e.g. 2: trace the whole GRPO groups a step that fit this many
                                                 # GB of traces a day (at least one; docs/tracing.md); empty: the
                                                 # config's rate (1 prompt per agent-loop worker)
LOGGER=${LOGGER:-}                               # e.g. console or console,wandb; empty: the profile's
EXPERIMENT_NAME=${EXPERIMENT_NAME:-}             # empty: gsm8k_<TOOL_SET>_<model>_<PROFILE>, <model> being the
                                                 # model's name (its hub id's or folder's last part)
OUTPUT_DIR=${OUTPUT_DIR:-}                       # checkpoints, dumps; multi-node: shared storage; empty:
                                                 # outputs/<EXPERIMENT_NAME> in this repo
PUBLISH_EVALS=${PUBLISH_EVALS:-0}                # 1: publish each validation to Weave as an Evaluation while training
TRACE_RELAY=${TRACE_RELAY:-auto}                 # auto: traces go through a relay on each node that keeps them on
                                                 # disk until W&B has them; offline: air-gapped, keep them for
                                                 # gsm8k-upload-traces; off: workers send straight to W&B
TRACE_SPOOL=${TRACE_SPOOL:-}                     # where each node's relay keeps traces, on that node's own disk;
                                                 # empty: $OUTPUT_DIR/trace_spool on one node, on a Ray cluster
                                                 # /var/tmp/gsm8k_recipe_traces/$EXPERIMENT_NAME/<node>
case "$PROFILE" in cpu_*) use_python cpu ;; *) use_python auto ;; esac  # sets PYTHON, says which and why
PYTHON=${PYTHON:-python3}                        # set by the line above: PYTHON, else the active venv, else the
                                                 # project's env (.venv-gpu, else .venv; .venv for cpu_* profiles)
DRY_RUN=${DRY_RUN:-0}                            # 1: preflight, print the plan, write the composed config; start nothing
DRY_RUN_CONFIG=${DRY_RUN_CONFIG:-}               # where DRY_RUN writes the config; empty: a new file in $TMPDIR
SUBMIT=${SUBMIT:-}                               # ray: submit as a Ray job to RAY_ADDRESS (submit_multinode.sh)
CHECK_ONLY=${CHECK_ONLY:-0}                      # 1: the launch preflight, a line per GPU-node check; start nothing
STALL_MINUTES=${STALL_MINUTES:-}                 # minutes with no step, validation or checkpoint before the watchdog
                                                 # reports (stacks of every process) and acts; empty: 4x the slowest
                                                 # step, at least 20 (3x that before the first step); 0: off
STALL_ACTION=${STALL_ACTION:-stop}               # stop: stop the run at once, exit 124; report: report, go on
STOP_WAIT_MINUTES=${STOP_WAIT_MINUTES:-15}       # SIGTERM, SIGINT or SIGUSR1: finish the step, save it, exit 75
                                                 # (resume: the same command); a second signal or no step end
                                                 # within this many minutes stops at once; 0: always at once
# -----------------------------------------------------------------------------------------------------

export PROFILE DATA_DIR TOOL_SET MODEL_PATH N_GPUS_PER_NODE NNODES GPU_MEMORY_GB TRACE TRACE_GB_PER_DAY LOGGER \
  EXPERIMENT_NAME OUTPUT_DIR PUBLISH_EVALS TRACE_RELAY TRACE_SPOOL PYTHON DRY_RUN DRY_RUN_CONFIG SUBMIT CHECK_ONLY \
  STALL_MINUTES STALL_ACTION STOP_WAIT_MINUTES
PYTHONPATH="$REPO_ROOT${PYTHONPATH:+:$PYTHONPATH}" exec "$PYTHON" -m recipes.launch "$@"
