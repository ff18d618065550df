#!/usr/bin/env bash
# Multi-turn tool-using GRPO on GSM8K with verl 0.9.1: async SGLang rollouts, Weave traces.
#
#   python data_prep/gsm8k.py && bash scripts/run_gsm8k_grpo.sh           # 8xH100, the recipe's defaults
#   PROFILE=1gpu_smoke bash scripts/run_gsm8k_grpo.sh                     # profiles: config/profiles/*.env
#   DRY_RUN=1 bash scripts/run_gsm8k_grpo.sh                              # preflight + print, start nothing
#   bash scripts/run_gsm8k_grpo.sh trainer.total_epochs=1                 # extra hydra overrides go last
#
# Every knob below can be set from the environment. A preflight (scripts/preflight.py) runs first and
# stops the launch, before any GPU work, on anything that would fail or silently do nothing.
set -euo pipefail

REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PROFILE=${PROFILE:-8xh100}
PROFILE_FILE="$REPO_ROOT/config/profiles/$PROFILE.env"
if [ ! -f "$PROFILE_FILE" ]; then
  echo "error: unknown PROFILE=$PROFILE; choose one of: $(cd "$REPO_ROOT/config/profiles" && ls ./*.env | sed 's|./||; s|\.env||' | xargs)" >&2
  exit 1
fi
# shellcheck source=/dev/null
source "$PROFILE_FILE"  # the profile's defaults; anything already in the environment wins

# ---- knobs ------------------------------------------------------------------------------------------
PYTHON=${PYTHON:-python3}
MODEL_PATH=${MODEL_PATH:-Qwen/Qwen2.5-3B-Instruct}
DATA_DIR=${DATA_DIR:-$HOME/data/gsm8k}           # where python data_prep/gsm8k.py writes
TOOL_SET=${TOOL_SET:-calculator}                 # calculator | calc_gsm8k_reward | both | none (as in the data prep)
N_GPUS_PER_NODE=${N_GPUS_PER_NODE:-8}
NNODES=${NNODES:-1}
TP=${TP:-2}                                      # SGLang tensor parallel size per engine
GPU_MEM_UTIL=${GPU_MEM_UTIL:-0.5}
ROLLOUT_N=${ROLLOUT_N:-16}                       # GRPO group size
TRAIN_BATCH_SIZE=${TRAIN_BATCH_SIZE:-256}        # prompts per step
PPO_MINI_BATCH_SIZE=${PPO_MINI_BATCH_SIZE:-256}
MICRO_BATCH_PER_GPU=${MICRO_BATCH_PER_GPU:-32}
MAX_PROMPT_LENGTH=${MAX_PROMPT_LENGTH:-1024}
MAX_RESPONSE_LENGTH=${MAX_RESPONSE_LENGTH:-1024} # all turns together, tool responses included
MAX_TURNS=${MAX_TURNS:-5}                        # assistant turns per trajectory
LR=${LR:-1e-6}
LORA_RANK=${LORA_RANK:-0}                        # >0 trains LoRA adapters (PROFILE=lora)
LORA_ALPHA=${LORA_ALPHA:-16}
REWARD_METHOD=${REWARD_METHOD:-strict}           # strict (#### answer) | flexible (last number)
TOOL_CALL_BONUS=${TOOL_CALL_BONUS:-0.0}          # e.g. 0.1 against tool-use collapse
TOTAL_EPOCHS=${TOTAL_EPOCHS:-15}
TOTAL_TRAINING_STEPS=${TOTAL_TRAINING_STEPS:-null}
TEST_FREQ=${TEST_FREQ:-20}
SAVE_FREQ=${SAVE_FREQ:-20}
VAL_MAX_SAMPLES=${VAL_MAX_SAMPLES:--1}
LOGGER=${LOGGER:-console,wandb}
TRACE=${TRACE:-on}                               # on: Weave traces of sampled rollouts; off: none
TRACE_SAMPLES=${TRACE_SAMPLES:-2}                # traced prompts per agent-loop worker per step (x n rollouts)
PROJECT_NAME=${PROJECT_NAME:-gsm8k_tool_grpo}
EXPERIMENT_NAME=${EXPERIMENT_NAME:-qwen2.5-3b-instruct_${TOOL_SET}}
OUTPUT_DIR=${OUTPUT_DIR:-$REPO_ROOT/outputs/$EXPERIMENT_NAME}
RECIPE_PATHS=${RECIPE_PATHS:-absolute}           # relative: for `ray job submit` (the repo is each worker's cwd)
DRY_RUN=${DRY_RUN:-0}
# -----------------------------------------------------------------------------------------------------

if [ "$RECIPE_PATHS" = relative ]; then ROOT=.; else ROOT=$REPO_ROOT; fi
if [ "$TOOL_SET" = none ]; then TOOL_CONFIG=null; else TOOL_CONFIG=$ROOT/config/tool_config/$TOOL_SET.yaml; fi
case "$TRACE" in
  on) TRACE_BACKEND=weave ;;
  off) TRACE_BACKEND=null ;;
  *) echo "error: TRACE must be on or off, not '$TRACE'" >&2; exit 1 ;;
esac

OVERRIDES=(
  "data.train_files=$DATA_DIR/train.parquet"
  "data.val_files=$DATA_DIR/test.parquet"
  "data.train_batch_size=$TRAIN_BATCH_SIZE"
  "data.max_prompt_length=$MAX_PROMPT_LENGTH"
  "data.max_response_length=$MAX_RESPONSE_LENGTH"
  "data.val_max_samples=$VAL_MAX_SAMPLES"
  "actor_rollout_ref.model.path=$MODEL_PATH"
  "actor_rollout_ref.model.lora_rank=$LORA_RANK"
  "actor_rollout_ref.model.lora_alpha=$LORA_ALPHA"
  "actor_rollout_ref.actor.optim.lr=$LR"
  "actor_rollout_ref.actor.ppo_mini_batch_size=$PPO_MINI_BATCH_SIZE"
  "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=$MICRO_BATCH_PER_GPU"
  "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=$MICRO_BATCH_PER_GPU"
  "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=$MICRO_BATCH_PER_GPU"
  "actor_rollout_ref.rollout.tensor_model_parallel_size=$TP"
  "actor_rollout_ref.rollout.gpu_memory_utilization=$GPU_MEM_UTIL"
  "actor_rollout_ref.rollout.n=$ROLLOUT_N"
  "actor_rollout_ref.rollout.multi_turn.max_assistant_turns=$MAX_TURNS"
  "actor_rollout_ref.rollout.multi_turn.tool_config_path=$TOOL_CONFIG"
  "actor_rollout_ref.rollout.agent.agent_loop_config_path=$ROOT/config/agent_loop.yaml"
  "actor_rollout_ref.rollout.trace.backend=$TRACE_BACKEND"
  "actor_rollout_ref.rollout.trace.max_samples_per_step_per_worker=$TRACE_SAMPLES"
  "reward.custom_reward_function.path=$ROOT/recipes/reward.py"
  "reward.custom_reward_function.reward_kwargs.method=$REWARD_METHOD"
  "reward.custom_reward_function.reward_kwargs.tool_call_bonus=$TOOL_CALL_BONUS"
  "trainer.use_v1=False"
  "trainer.logger=[$LOGGER]"
  "trainer.project_name=$PROJECT_NAME"
  "trainer.experiment_name=$EXPERIMENT_NAME"
  "trainer.n_gpus_per_node=$N_GPUS_PER_NODE"
  "trainer.nnodes=$NNODES"
  "trainer.total_epochs=$TOTAL_EPOCHS"
  "trainer.total_training_steps=$TOTAL_TRAINING_STEPS"
  "trainer.test_freq=$TEST_FREQ"
  "trainer.save_freq=$SAVE_FREQ"
  "trainer.default_local_dir=$OUTPUT_DIR/checkpoints"
  "trainer.rollout_data_dir=$OUTPUT_DIR/rollouts"
  "trainer.validation_data_dir=$OUTPUT_DIR/validation"
)

CMD=("$PYTHON" -m verl.trainer.main_ppo --config-path="$REPO_ROOT/config" --config-name=gsm8k_multiturn_grpo
     "${OVERRIDES[@]}" "$@")

cd "$REPO_ROOT"  # Ray puts the driver's cwd on every local worker's sys.path: our tools and recipes import there
export PYTHONPATH="$REPO_ROOT${PYTHONPATH:+:$PYTHONPATH}"

PREFLIGHT=("$PYTHON" "$REPO_ROOT/scripts/preflight.py")
if [ "$DRY_RUN" = 1 ]; then
  "${PREFLIGHT[@]}" --print-config -- "${OVERRIDES[@]}" "$@"
  echo "# DRY_RUN=1: preflight passed; the launch would run (profile $PROFILE):"
  printf '%q ' "${CMD[@]}"; echo
  exit 0
fi
"${PREFLIGHT[@]}" --launch -- "${OVERRIDES[@]}" "$@"

ulimit -n 65535 2>/dev/null || echo "warning: could not raise the open-files limit (ulimit -n 65535); Ray may run out" >&2
exec "${CMD[@]}"
