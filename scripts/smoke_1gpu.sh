#!/usr/bin/env bash
# Two training steps of the whole recipe on one GPU with Qwen2.5-0.5B-Instruct (minutes once the model is
# downloaded; times: docs/measured.md): checks the GPU install before you reserve a node. Extra arguments go to the
# launcher.
#   python data_prep/gsm8k.py --train_size 256 --test_size 64 --local_save_dir ~/data/gsm8k_smoke
#   DATA_DIR=~/data/gsm8k_smoke bash scripts/smoke_1gpu.sh
HELP_KNOBS_OF=run_gsm8k_grpo.sh . "$(dirname "${BASH_SOURCE[0]}")/help.sh" "$@"  # -h/--help: usage, knobs; runs nothing
set -euo pipefail
PROFILE=1gpu_smoke exec bash "$(dirname "${BASH_SOURCE[0]}")/run_gsm8k_grpo.sh" "$@"
