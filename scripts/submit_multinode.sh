#!/usr/bin/env bash
# Multi-node: submit the launcher as a Ray job to a running cluster (`ray start --head` on node 0,
# `ray start --address=<head>:6379` on the others; every node has the GPU env and the data at DATA_DIR).
#   RAY_ADDRESS=http://<head>:8265 NNODES=2 bash scripts/submit_multinode.sh [hydra overrides]
# The preflight runs here first (DRY_RUN), then on the cluster before training starts.
set -euo pipefail
REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
: "${RAY_ADDRESS:?set RAY_ADDRESS to the Ray dashboard address, e.g. http://10.0.0.1:8265}"
export PROFILE=${PROFILE:-multinode}
cd "$REPO_ROOT"
DRY_RUN=1 bash scripts/run_gsm8k_grpo.sh "$@" >/dev/null
KNOBS=()
for var in $(compgen -e); do
  case "$var" in
    MODEL_PATH|DATA_DIR|TOOL_SET|N_GPUS_PER_NODE|NNODES|TP|GPU_MEM_UTIL|ROLLOUT_N|TRAIN_BATCH_SIZE|PPO_MINI_BATCH_SIZE|\
    MICRO_BATCH_PER_GPU|MAX_PROMPT_LENGTH|MAX_RESPONSE_LENGTH|MAX_TURNS|LR|LORA_RANK|LORA_ALPHA|REWARD_METHOD|\
    TOOL_CALL_BONUS|TOTAL_EPOCHS|TOTAL_TRAINING_STEPS|TEST_FREQ|SAVE_FREQ|LOGGER|TRACE|TRACE_SAMPLES|PROJECT_NAME|\
    EXPERIMENT_NAME|OUTPUT_DIR|PROFILE|WANDB_API_KEY) KNOBS+=("$var=${!var}") ;;
  esac
done
exec ray job submit --address="$RAY_ADDRESS" --runtime-env=config/ray_runtime_env.yaml -- \
  env "${KNOBS[@]}" RECIPE_PATHS=relative bash scripts/run_gsm8k_grpo.sh "$@"
