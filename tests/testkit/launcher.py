"""Run scripts/run_gsm8k_grpo.sh (and its wrappers) as users do, in a subprocess, and read what it printed.

No stand-in: the real launcher and preflight. A DRY_RUN prints the plan (ending with the file it wrote the
composed config to) and, last, the main_ppo command; a launch-mode call in tests must always fail its preflight
so that nothing starts."""

from __future__ import annotations

import importlib.util
import os
import shlex
import subprocess
import sys
from pathlib import Path
from types import ModuleType

from recipes.constants import REPO_ROOT

SCRIPTS = REPO_ROOT / "scripts"
# what a user's shell might carry that would change what the launcher does
_CLEARED = ("WANDB_API_KEY", "PREFLIGHT_", "PROFILE", "RAY_ADDRESS", "SUBMIT", "RECIPE_RESOLVED",
            "OUTPUT_DIR", "EXPERIMENT_NAME", "MODEL_PATH", "TRACE", "LOGGER", "TOOL_SET", "N_GPUS_PER_NODE",
            "NNODES", "PUBLISH_EVALS", "TRACE_RELAY", "DRY_RUN_CONFIG", "CHECK_ONLY", "CUDA_VISIBLE_DEVICES")


def run_script(script: str, data_dir, *args, timeout: int = 180, **env) -> subprocess.CompletedProcess:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(_CLEARED)}
    full_env.update({"PYTHON": sys.executable, "DATA_DIR": str(data_dir), **env})
    return subprocess.run(["bash", str(SCRIPTS / script), *args], env=full_env, capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


def load_script(name: str) -> ModuleType:
    """scripts/<name>.py as a module, to call its main() in this process (scripts/ is not a package)."""
    spec = importlib.util.spec_from_file_location(f"{name}_script", SCRIPTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def launch(data_dir, *args, **env) -> subprocess.CompletedProcess:
    return run_script("run_gsm8k_grpo.sh", data_dir, *args, **env)


def printed_command(stdout: str) -> list[str]:
    return shlex.split(stdout.strip().splitlines()[-1])


def printed_overrides(stdout: str) -> list[str]:
    """The hydra overrides of the printed main_ppo command (what follows --config-name)."""
    command = printed_command(stdout)
    return command[next(i for i, a in enumerate(command) if a.startswith("--config-name")) + 1:]


def override_dict(overrides: list[str]) -> dict[str, str]:
    return dict(o.lstrip("+").split("=", 1) for o in overrides)


def plan_line(stdout: str, key: str) -> str:
    """The value of one row of a DRY_RUN's plan ("#   <key>  <value>")."""
    return next(line.split(None, 2)[2] for line in stdout.splitlines() if line.split(None, 2)[:2] == ["#", key])


def written_config(stdout: str) -> str:
    """The composed config (YAML) a DRY_RUN wrote to the file its plan names."""
    return Path(plan_line(stdout, "config").split(" (")[0]).read_text()
