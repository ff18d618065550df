#!/usr/bin/env bash
# The CPU learning check: does the recipe's GRPO turn reward into better tool use? On a 2-core machine
# with no GPU and no hub: a synthetic arithmetic task in GSM8K's format (recipes/harness/learning/task.py; TASK=chain:
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
#   SFT_STEPS=20 GRPO_STEPS=2 TEST_ROWS=16 bash scripts/learn_cpu.sh   # a quick pass through every stage
#   SFT_MODEL=/tmp/gsm8k_cpu_learn/model_sft bash scripts/learn_cpu.sh  # GRPO again from an earlier warm start
#
# The pipeline is `python -m recipes.harness.learning` (recipes/harness/learning/pipeline.py); this script holds its
# knobs. Scores come from the user's path: scripts/export_checkpoint.py, then `DEVICE=cpu PROFILE=cpu_learn
# scripts/eval_gsm8k.sh` (a validation-only run of the launcher, scored by scripts/eval_summary.py), tools on and off;
# their logs and summaries are under $WORK_DIR/eval/.
# Last line: RESULT sft_acc=<a> final_acc=<b> tools_off_acc=<c> tool_call_rate=<d> wall_s=<s> sft_attempts=<n>
# (held-out strict accuracies at EVAL_TEMPERATURE, the final checkpoint's tools-off accuracy and tool-call rate;
# sft_attempts: inits tried until the SFT converged, 0 with SFT_MODEL). TASK=chain: RESULT sft_acc=<a>
# final_acc=<b> sft_acc_3=<c> final_acc_3=<d> calls_per_op=<e> tools_off_acc=<f> tool_call_rate=<g> wall_s=<s>
# (_3: on the 3-step problems; calls_per_op: the final model's calls per required operation on its correct
# answers to 2- and 3-step problems). Traces: the launcher's TRACE and TRACE_RELAY knobs apply to the GRPO run.
. "$(dirname "${BASH_SOURCE[0]}")/help.sh" "$@"  # -h/--help: usage, knobs; runs nothing
set -euo pipefail

REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
. "$REPO_ROOT/scripts/python_env.sh"

# ---- knobs (where two defaults are given, by_task picks: one_step's, chain's) -------------------------
by_task() { if [ "${TASK:-one_step}" = chain ]; then echo "$2"; else echo "$1"; fi; }
PYTHON=${PYTHON:-}                          # empty: the active venv, else the project's CPU env (.venv)
TASK=${TASK:-one_step}                      # one_step: one operation per problem | chain: 1, 2 or 3 in a row
WORK_DIR=${WORK_DIR:-/tmp/gsm8k_cpu_learn$(by_task "" _chain)}  # task, data, models, outputs: cleared at the start
SEED=${SEED:-0}                             # task, model init, SFT order, rollouts
TRAIN_ROWS=${TRAIN_ROWS:-$(by_task 4000 6000)}
TEST_ROWS=${TEST_ROWS:-$(by_task 256 300)}  # held-out problems scored before and after (chain: a third per depth)
SFT_STEPS=${SFT_STEPS:-$(by_task 2600 5500)}  # the warm start's budget (batch SFT_BATCH)
SFT_SCHEDULE_STEPS=${SFT_SCHEDULE_STEPS:-$(by_task "" 8000)}  # its cosine's length (empty: SFT_STEPS); chain: longer, so
                                            # the rate stays high until the model copies the right numbers
SFT_TOOL_ONLY_STEPS=${SFT_TOOL_ONLY_STEPS:-$(by_task 2000 4500)}  # first on tool transcripts only: the model learns to copy
                                            # (chain: longer, until the right numbers go into every call)
SFT_TOOL_FRACTION=${SFT_TOOL_FRACTION:-0.5} # then each step calls the tool with this
                                            # probability, else the answer comes at once: GRPO must learn it pays
SFT_MAX_DEPTH=${SFT_MAX_DEPTH:-0}           # chain: 2 leaves the 3-step problems out of the SFT (GRPO sees them)
SFT_BATCH=${SFT_BATCH:-16}
SFT_LR=${SFT_LR:-3e-3}
SFT_WEIGHT_DECAY=${SFT_WEIGHT_DECAY:-$(by_task 0 0.1)}  # AdamW's; chain: 0.1 gets more inits past the copy
                                            # plateau (loss < 0.03) in time (docs/learning-notebook.md)
SFT_CONVERGED_LOSS=${SFT_CONVERGED_LOSS:-0.03}  # the tool-only phase must end below it, or the SFT restarts ...
SFT_ATTEMPTS=${SFT_ATTEMPTS:-3}             # ... from a new init (seed SEED+1000*attempt), this many tries in all
GRPO_STEPS=${GRPO_STEPS:-60}                # 8 prompts x 8 rollouts each
MAX_TURNS=${MAX_TURNS:-$(by_task "" 5)}     # assistant turns per rollout (empty: the profile's 3; 3 calls + answer = 4)
RESPONSE_LENGTH=${RESPONSE_LENGTH:-$(by_task "" 192)}  # response tokens (empty: the profile's 96; 3 steps: ~140)
SFT_MODEL=${SFT_MODEL:-}                    # a model folder from an earlier SFT (same SEED/rows): skip the SFT
EVAL_TEMPERATURE=${EVAL_TEMPERATURE:-1.0}   # 1.0: sampled, as rollouts are; 0: greedy
THREADS=${THREADS:-2}                       # the SFT's torch threads (part of its arithmetic: 1 and 2 differ)
CPU_ISA=${CPU_ISA:-avx2}                    # the instruction set torch's and MKL's CPU kernels use: with it pinned,
                                            # a seed gives the same warm start on any x86-64 CPU that has it (a
                                            # CPU's own best, e.g. AVX-512, rounds differently); native: the CPU's best
# -----------------------------------------------------------------------------------------------------
use_python cpu
export PYTHON TASK WORK_DIR SEED TRAIN_ROWS TEST_ROWS SFT_STEPS SFT_SCHEDULE_STEPS SFT_TOOL_ONLY_STEPS \
  SFT_TOOL_FRACTION SFT_MAX_DEPTH SFT_BATCH SFT_LR SFT_WEIGHT_DECAY SFT_CONVERGED_LOSS SFT_ATTEMPTS GRPO_STEPS \
  MAX_TURNS RESPONSE_LENGTH SFT_MODEL EVAL_TEMPERATURE THREADS CPU_ISA
cd "$REPO_ROOT"
PYTHONPATH="$REPO_ROOT${PYTHONPATH:+:$PYTHONPATH}" exec "$PYTHON" -m recipes.harness.learning "$@"
