#!/usr/bin/env bash
# Multi-turn tool-using GRPO on GSM8K with verl 0.9.1: async SGLang rollouts, Weave traces.
#
#   python data_prep/gsm8k.py && bash scripts/run_gsm8k_grpo.sh           # 8xH100, the recipe's defaults
#   PROFILE=4gpu bash scripts/run_gsm8k_grpo.sh                           # config/profile/*.yaml
#   DRY_RUN=1 bash scripts/run_gsm8k_grpo.sh                              # preflight + the plan, start nothing
#   CHECK_ONLY=1 bash scripts/run_gsm8k_grpo.sh                           # check this GPU node, start nothing
#   bash scripts/run_gsm8k_grpo.sh trainer.total_epochs=1                 # hydra overrides go last and win
#
# The knobs (PROFILE, DATA_DIR, MODEL_PATH, DRY_RUN, ...) are environment variables, each declared once with its
# default and meaning in recipes/launch/knobs.py: --help lists them from there. Every other setting lives once, in
# config/gsm8k_multiturn_grpo.yaml or a profile, and is changed with a hydra override. The launcher itself is
# `python -m recipes.launch` (recipes/launch/): it reads the knobs, maps them to hydra overrides, runs the preflight
# (which stops the launch, before any GPU work, on anything that would fail or silently do nothing), then main_ppo
# with a trace relay on every node and, if asked, the evaluation watcher beside it. This script picks its Python.
HELP_KNOBS_FROM=recipes.launch.knobs . "$(dirname "${BASH_SOURCE[0]}")/help.sh" "$@"  # -h/--help: usage, knobs
set -euo pipefail

REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
. "$REPO_ROOT/scripts/python_env.sh"
# the one knob read here: which env runs the launcher (the CPU profiles run in the CPU env)
case "${PROFILE:-}" in cpu_*) use_python cpu ;; *) use_python auto ;; esac  # sets PYTHON, says which and why
PYTHONPATH="$REPO_ROOT${PYTHONPATH:+:$PYTHONPATH}" exec "$PYTHON" -m recipes.launch "$@"
