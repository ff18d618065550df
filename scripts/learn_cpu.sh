#!/usr/bin/env bash
# The CPU learning check: does the recipe's GRPO turn reward into better tool use? On a 2-core machine
# with no GPU and no hub: a synthetic arithmetic task in GSM8K's format (scripts/harness/learning/task.py; TASK=chain:
# problems of 1, 2 or 3 chained operations) prepared by the recipe's data prep; a small tokenizer and a
# ~0.46M-parameter Qwen2 built offline; an SFT warm start on transcripts rendered as verl's agent loop renders them;
# then GRPO through the recipe's own launcher (scripts/run_gsm8k_grpo.sh, PROFILE=cpu_learn: no steering, every
# token the model's) with the recipe's calculator, reward and agent loop; the final checkpoint exported and scored
# tools on and tools off.
#
#   bash scripts/learn_cpu.sh                      # work dir /tmp/gsm8k_cpu_learn
#   SEED=1 WORK_DIR=/tmp/learn_s1 bash scripts/learn_cpu.sh
#   TASK=chain bash scripts/learn_cpu.sh           # 1-3 chained calls per problem; work dir /tmp/gsm8k_cpu_learn_chain
#   TASK=chain TRACE=on TRACE_RELAY=offline WANDB_ENTITY=<entity> bash scripts/learn_cpu.sh  # traces kept on disk
#   SFT_STEPS=20 SFT_TOOL_ONLY_STEPS=10 SFT_CONVERGED_LOSS=9 GRPO_STEPS=2 TEST_ROWS=16 bash scripts/learn_cpu.sh
#                                                  # a quick pass through every stage (a warm start that learned nothing)
#   SFT_MODEL=/tmp/gsm8k_cpu_learn/model_sft bash scripts/learn_cpu.sh  # GRPO again from an earlier warm start
#
# The pipeline is `python -m harness.learning` (scripts/harness/learning/pipeline.py); this script holds its
# knobs. Scores come from the user's path: gsm8k-export-checkpoint, then `DEVICE=cpu PROFILE=cpu_learn
# scripts/eval_gsm8k.sh` (a validation-only run of the launcher, scored by gsm8k-eval-summary), tools on and off;
# their logs and summaries are under $WORK_DIR/eval/.
# Last line: RESULT sft_acc=<a> final_acc=<b> tools_off_acc=<c> tool_call_rate=<d> wall_s=<s> sft_attempts=<n>
# (held-out strict accuracies at EVAL_TEMPERATURE, the final checkpoint's tools-off accuracy and tool-call rate;
# sft_attempts: inits tried until the SFT converged, 0 with SFT_MODEL). TASK=chain: RESULT sft_acc=<a>
# final_acc=<b> sft_acc_3=<c> final_acc_3=<d> calls_per_op=<e> tools_off_acc=<f> tool_call_rate=<g> wall_s=<s>
# (_3: on the 3-step problems; calls_per_op: the final model's calls per required operation on its correct
# answers to 2- and 3-step problems). Traces: the launcher's TRACE and TRACE_RELAY knobs apply to the GRPO run.
HELP_KNOBS_OF=learn_knobs.sh . "$(dirname "${BASH_SOURCE[0]}")/help.sh" "$@"  # -h/--help: usage, knobs; runs nothing
set -euo pipefail

REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
. "$REPO_ROOT/scripts/python_env.sh"

# ---- knobs: the task, the warm start and the scoring are the learning checks' (scripts/learn_knobs.sh) -------
. "$REPO_ROOT/scripts/learn_knobs.sh"
WORK_DIR=${WORK_DIR:-/tmp/gsm8k_cpu_learn$(by_task "" _chain)}  # task, data, models, outputs: cleared at the start
GRPO_STEPS=${GRPO_STEPS:-60}                # 8 prompts x 8 rollouts each
CPU_ISA=${CPU_ISA:-avx2}                    # the instruction set torch's and MKL's CPU kernels use: with it pinned,
                                            # a seed gives the same warm start on any x86-64 CPU that has it (a
                                            # CPU's own best, e.g. AVX-512, rounds differently); native: the CPU's best
# -----------------------------------------------------------------------------------------------------
use_python cpu
export WORK_DIR GRPO_STEPS CPU_ISA
cd "$REPO_ROOT"
PYTHONPATH="$REPO_ROOT:$REPO_ROOT/scripts${PYTHONPATH:+:$PYTHONPATH}" exec "$PYTHON" -m harness.learning "$@"
