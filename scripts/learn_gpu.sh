#!/usr/bin/env bash
# The GPU learning check: tool calls through SGLang, learned, on one GPU in about ten minutes, with no hub. The CPU
# learning check's task and recipe (scripts/learn_cpu.sh) with a ~0.66M-parameter Qwen2 whose attention SGLang's and
# FlashInfer's kernels serve (head_dim 64; the CPU check's tokenizer): the SFT warm start on the GPU, then GRPO
# through the recipe's own launcher (scripts/run_gsm8k_grpo.sh, PROFILE=gpu_learn: SGLang async multi-turn rollouts,
# the recipe's agent loop, calculator and in-loop reward) in ONE launch, which validates before the first step and
# after the last on the held-out problems with tools on and with tools off (two files, their metrics apart).
#
#   bash scripts/learn_gpu.sh                                  # one_step task, 20 GRPO steps; work dir /tmp/gsm8k_gpu_learn
#   DRY_RUN=1 bash scripts/learn_gpu.sh                        # task, data, tokenizer, model and its SGLang check, the
#                                                              # composed gpu_learn config and the plan; nothing trains
#   SFT_MODEL=/tmp/gsm8k_gpu_learn/model_sft bash scripts/learn_gpu.sh   # GRPO again from an earlier warm start
#   TASK=chain bash scripts/learn_gpu.sh                       # 1-3 chained calls (longer than ten minutes)
#   DEVICE=cpu SFT_STEPS=20 SFT_TOOL_ONLY_STEPS=10 SFT_CONVERGED_LOSS=9 GRPO_STEPS=2 TEST_ROWS=16 \
#     bash scripts/learn_gpu.sh                                # every stage on the CPU stand-ins, quickly
#
# Split at the seam, the GPU's minutes spent on SGLang and GRPO only:
#   PREPARE_ONLY=1 bash scripts/learn_gpu.sh                   # on any CPU machine: task, data, tokenizer, the warm
#                                                              # start trained on the CPU, its SGLang check and CPU
#                                                              # score, the composed config -> WORK_DIR/prepared
#   PREPARED=/tmp/gsm8k_gpu_learn/prepared bash scripts/learn_gpu.sh   # on the GPU node (the folder copied there, the
#                                                              # same knobs): GRPO and the scores only, ~6 minutes
#
# The pipeline is `python -m harness.learning.gpu_pipeline` (scripts/harness/learning/gpu_pipeline.py); this
# script holds its knobs, the learning checks' shared ones in scripts/learn_knobs.sh. Everything it writes (task,
# data, models, the launch's outputs and logs, scores) is under WORK_DIR; extra arguments are hydra overrides for
# the launch. `[learn_gpu] stage: ...` lines mark its stages; the verdict's lines (the CPU check's rule: +20 points
# over the SFT start, tool-call rate >= 0.8, tools on >= tools off + 20, the last met by construction: the warm start
# never sees a prompt without tools) and the last line:
# RESULT sft_acc=<a> final_acc=<b> tools_off_acc=<c> tool_call_rate=<d> tool_calls_per_trajectory=<e> turns_mean=<f>
# steps=<n> wall_s=<s> (one line: strict accuracies of the validations before and after, sampled at EVAL_TEMPERATURE;
# the rest of the one after, tools on; TASK=chain adds sft_acc_3, final_acc_3 and calls_per_op).
HELP_KNOBS_OF=learn_knobs.sh . "$(dirname "${BASH_SOURCE[0]}")/help.sh" "$@"  # -h/--help: usage, knobs; runs nothing
set -euo pipefail

REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
. "$REPO_ROOT/scripts/python_env.sh"

# ---- knobs: the task, the warm start and the scoring are the learning checks' (scripts/learn_knobs.sh) -------
. "$REPO_ROOT/scripts/learn_knobs.sh"
WORK_DIR=${WORK_DIR:-/tmp/gsm8k_gpu_learn$(by_task "" _chain)}  # everything the check writes: cleared at the start
GRPO_STEPS=${GRPO_STEPS:-$(by_task 20 60)}  # 8 prompts x 8 rollouts each; one_step: on CPU this model had gained
                                            # +50 points by step 20, and 20 fit ten GPU-minutes
DEVICE=${DEVICE:-gpu}                       # gpu: SGLang, the SFT on CUDA | cpu: the CPU stand-ins (hf_cpu), same stages
DRY_RUN=${DRY_RUN:-0}                       # 1: up to the launcher's DRY_RUN (config and plan); nothing trains
PREPARE_ONLY=${PREPARE_ONLY:-0}             # 1: everything that needs no GPU, the SFT on the CPU, into
                                            # WORK_DIR/prepared (a few MB, manifest.json); ends with a PREPARED line
PREPARED=${PREPARED:-}                      # a folder PREPARE_ONLY made with the same knobs: only GRPO and the
                                            # scores run (a folder made otherwise is refused in one line)
# -----------------------------------------------------------------------------------------------------
if [ "$DEVICE" = cpu ]; then use_python cpu; else use_python auto; fi  # sets PYTHON, says which and why
if [ -n "$PREPARED" ] && [ -d "$PREPARED" ]; then PREPARED=$(cd "$PREPARED" && pwd); fi  # before the cd below
export WORK_DIR GRPO_STEPS DEVICE DRY_RUN PREPARE_ONLY PREPARED
cd "$REPO_ROOT"
PYTHONPATH="$REPO_ROOT:$REPO_ROOT/scripts${PYTHONPATH:+:$PYTHONPATH}" exec "$PYTHON" -m harness.learning.gpu_pipeline "$@"
