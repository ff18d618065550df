"""The recipe's Python: what verl loads in training (rollout/, tracing/, cpu_backend/), the launcher and its
preflight, results and export, the GPU env's tools, and the harness (stand-ins, learning checks, benchmarks).

Modules that moved keep their old name only to say where they went: `python -m recipes.jit_kernels` (or an import
of it, or a saved config naming it) fails with one line naming the new module."""

import importlib.abc
import sys

MOVED = {  # old module -> where it lives now
    "recipes.agent_loop": "recipes.rollout.agent_loop",
    "recipes.agent_loop_worker": "recipes.rollout.worker",
    "recipes.tool_parser": "recipes.rollout.tool_parser",
    "recipes.trajectory_score": "recipes.rollout.score",
    "recipes.reward": "recipes.rollout.reward",
    "recipes.weave_sender": "recipes.tracing.sender",
    "recipes.trace_location": "recipes.tracing.location",
    "recipes.cuda_toolchain": "recipes.gpu_env.cuda_toolchain",
    "recipes.jit_kernels": "recipes.gpu_env.jit_kernels",
    "recipes.kernel_census": "recipes.gpu_env.kernel_census",
    "recipes.sglang_patch": "recipes.gpu_env.sglang_patch",
    "recipes.evaluation": "recipes.results and recipes.export",
    "recipes.rollout_report": "recipes.results",
    "recipes.agent_loop_inprocess": "recipes.harness.agent_loop_inprocess",
    "recipes.standins": "recipes.harness.standins",
    "recipes.cpu_learning": "recipes.harness.learning",
    "recipes.cpu_backend.qwen_tokenizer": "recipes.harness.qwen_tokenizer",
}


class _MovedModules(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        old = next((o for o in MOVED if name == o or name.startswith(o + ".")), None)
        if old is not None:
            raise ModuleNotFoundError(f"{name} has moved: it is {MOVED[old]}{name[len(old):]} now", name=name)
        return None


sys.meta_path.insert(0, _MovedModules())
