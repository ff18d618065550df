# shellcheck shell=bash
# Sourced, not run: the knobs the two learning checks share (scripts/learn_cpu.sh, scripts/learn_gpu.sh), with
# their defaults: the task, the small model's warm start and the scoring. The GPU check learns exactly what the CPU
# check learns, so its recipe has this one home; each script adds its own knobs (WORK_DIR, GRPO_STEPS, ...) after.
# Where two defaults are given, by_task picks: one_step's, chain's.
by_task() { if [ "${TASK:-one_step}" = chain ]; then echo "$2"; else echo "$1"; fi; }
PYTHON=${PYTHON:-}                          # empty: the active venv, else the project's env (.venv; the GPU
                                            # check: .venv-gpu if there)
TASK=${TASK:-one_step}                      # one_step: one operation per problem | chain: 1, 2 or 3 in a row
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
MAX_TURNS=${MAX_TURNS:-$(by_task "" 5)}     # assistant turns per rollout (empty: the profile's 3; 3 calls + answer = 4)
RESPONSE_LENGTH=${RESPONSE_LENGTH:-$(by_task "" 192)}  # response tokens (empty: the profile's 96; 3 steps: ~140)
SFT_MODEL=${SFT_MODEL:-}                    # a model folder from an earlier SFT (same SEED/rows): skip the SFT
EVAL_TEMPERATURE=${EVAL_TEMPERATURE:-1.0}   # 1.0: sampled, as rollouts are; 0: greedy
THREADS=${THREADS:-2}                       # the SFT's torch threads on CPU (part of its arithmetic: 1 and 2 differ)
export PYTHON TASK SEED TRAIN_ROWS TEST_ROWS SFT_STEPS SFT_SCHEDULE_STEPS SFT_TOOL_ONLY_STEPS SFT_TOOL_FRACTION \
  SFT_MAX_DEPTH SFT_BATCH SFT_LR SFT_WEIGHT_DECAY SFT_CONVERGED_LOSS SFT_ATTEMPTS MAX_TURNS RESPONSE_LENGTH SFT_MODEL \
  EVAL_TEMPERATURE THREADS
