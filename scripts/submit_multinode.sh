#!/usr/bin/env bash
# Multi-node: run the launcher as a Ray job on a running cluster (`ray start --head` on node 0,
# `ray start --address=<head>:6379` on the others; every node has the GPU env and the data at DATA_DIR).
#   RAY_ADDRESS=http://<head>:8265 OUTPUT_DIR=/shared/gsm8k_run bash scripts/submit_multinode.sh [hydra overrides]
# Same knobs and overrides as scripts/run_gsm8k_grpo.sh (PROFILE defaults to multinode). The preflight runs here,
# then recipes/launch/ray_job.py submits: W&B settings reach every node's workers, the API key never appears in
# the job's entrypoint or runtime env, and OUTPUT_DIR must be shared storage (checked).
HELP_KNOBS_OF=run_gsm8k_grpo.sh . "$(dirname "${BASH_SOURCE[0]}")/help.sh" "$@"  # -h/--help: usage, knobs; runs nothing
set -euo pipefail
PROFILE=${PROFILE:-multinode}  # config/profile/<PROFILE>.yaml: two 8-GPU nodes
: "${RAY_ADDRESS:?set RAY_ADDRESS to the Ray dashboard address, e.g. http://10.0.0.1:8265}"
PROFILE=$PROFILE SUBMIT=ray exec bash "$(dirname "${BASH_SOURCE[0]}")/run_gsm8k_grpo.sh" "$@"
