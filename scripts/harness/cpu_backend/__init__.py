"""The recipe's CPU backend: verl 0.9.1's real trainer (verl's main_ppo) on a machine without a
GPU, a device plugin as verl's own are (verl/plugin/platform/). CPU stand-ins for the parts verl only ships for
accelerators, plugged in through verl's own extension points (no verl source is changed or patched). Users run it
through scripts/smoke_cpu.sh (config/profile/cpu_smoke.yaml), `DEVICE=cpu scripts/eval_gsm8k.sh` and
scripts/learn_cpu.sh (config/profile/cpu_learn.yaml); scripts/cpu_env.sh sets the environment it needs.

- plugin.py        VERL_USE_EXTERNAL_MODULES target: registers the two below in every process
- platform.py      the "cpu" platform (stands in for verl's CUDA platform plugin)
- rollout.py       the "hf_cpu" rollout backend (stands in for verl's SGLang replica and trainer-side adapter)
- server.py        its per-replica server actor (stands in for SGLang's server), generation.py its token loop
- steering.py      the one departure from an LLM: some first turns are written as a tool call
- worker_setup.py  actor_rollout_ref.model.external_lib target: gloo process group, registers engine.py
- engine.py        verl's FSDP2 engine registered for device "cpu"
The Qwen2.5 tokenizer rebuilt offline and the tiny random Qwen2 model the smoke trains are harness/qwen_tokenizer.py.
"""

from recipes.constants import CPU_ROLLOUT_NAME as ROLLOUT_NAME  # noqa: F401  the CPU rollout backend
