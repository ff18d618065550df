"""The launcher's quiet console (recipes/launch/console.py): each warning filter it puts in PYTHONWARNINGS silences the
line a GPU run printed (the lines below are the H100 smoke's, word for word), Python accepts every filter, a user's
own PYTHONWARNINGS and RAY_AUTH_MODE still win, and a Ray job's workers on other nodes get the same filters. The CPU
end-to-end test checks the real processes of a launch (tests/test_e2e_cpu.py)."""

import json
import os
import subprocess
import sys

import pytest

from recipes.launch import ray_job
from recipes.launch.console import quiet_environment

pytestmark = pytest.mark.integration

# (category, message) of Python warnings in the 1-GPU smoke's log on an H100 (verl 0.9.1, torch 2.11, SGLang 0.5.12)
GPU_RUN_WARNINGS = [
    ("UserWarning", "torchtitan engine is not available: ModuleNotFoundError(\"No module named 'torchtitan'\")"),
    ("UserWarning", "veomni engine is not available: ModuleNotFoundError(\"No module named 'veomni'\")"),
    ("UserWarning", "automodel engine is not available: ModuleNotFoundError(\"No module named 'nemo_automodel'\")"),
    ("UserWarning", "mindspeed engine is not available: ModuleNotFoundError(\"No module named 'megatron'\")"),
    ("UserWarning", "megatron engine is not available: ModuleNotFoundError(\"No module named 'megatron'\")"),
    ("FutureWarning", "FSDP.state_dict_type() and FSDP.set_state_dict_type() are being deprecated. Please use APIs, "
                      "get_state_dict() and set_state_dict(), which can support different parallelisms, FSDP1, FSDP2, "
                      "DDP."),
    ("FutureWarning", "torch.cuda._set_allocator_settings is deprecated. Use "
                      "torch._C._accelerator_setAllocatorSettings instead."),
    ("UserWarning", "FSDP is switching to use `NO_SHARD` instead of ShardingStrategy.FULL_SHARD since the world size "
                    "is 1."),
    ("UserWarning", "When using ``NO_SHARD`` for ``ShardingStrategy``, full_state_dict will be returned."),
    ("DeprecationWarning", "ORJSONResponse is deprecated, FastAPI now serializes data directly to JSON bytes via "
                           "Pydantic when a return type or response model is set"),
]
KEPT = ("FutureWarning", "Warning: Class 'verl.trainer.ppo.ray_trainer.RayPPOTrainer' is deprecated.")  # explained


def _warn_all(env: dict[str, str], lines) -> subprocess.CompletedProcess:
    """A fresh Python with this environment (the filters are read at start-up) raises each warning once."""
    code = "import builtins, json, sys, warnings\nfor category, message in json.loads(sys.argv[1]):\n" \
           "    warnings.warn(message, getattr(builtins, category))\n"
    return subprocess.run([sys.executable, "-c", code, json.dumps(lines)], env={**os.environ, **env},
                          capture_output=True, text=True, timeout=60)


def test_every_filter_silences_the_line_the_gpu_run_printed_and_nothing_else():
    env = quiet_environment({}, cluster=False)
    run = _warn_all(env, [*GPU_RUN_WARNINGS, KEPT])
    assert run.returncode == 0 and "Invalid -W option" not in run.stderr, run.stderr
    shown = [line for line in run.stderr.splitlines() if "Warning: " in line]
    assert len(shown) == 1 and KEPT[1] in shown[0], run.stderr
    assert len(_warn_all({}, GPU_RUN_WARNINGS).stderr.splitlines()) >= len(GPU_RUN_WARNINGS)  # unfiltered: all shown


def test_a_users_own_settings_win():
    env = quiet_environment({"PYTHONWARNINGS": "error", "RAY_AUTH_MODE": "disabled"}, cluster=False)
    assert env["PYTHONWARNINGS"].endswith(",error") and "RAY_AUTH_MODE" not in env
    run = _warn_all(env, GPU_RUN_WARNINGS[:1])
    assert run.returncode != 0 and "torchtitan engine is not available" in run.stderr  # "error" made it raise


@pytest.mark.parametrize("cluster", [False, True])
def test_ray_auth_is_named_for_a_ray_the_launch_starts_and_left_to_a_cluster(cluster):
    env = quiet_environment({}, cluster=cluster)
    assert env.get("RAY_AUTH_MODE") == (None if cluster else "token")


def test_a_ray_jobs_workers_on_every_node_get_the_filters():
    env_vars = ray_job.build_runtime_env({"HOME": "/nonexistent"}, None)["env_vars"]
    assert env_vars["PYTHONWARNINGS"] == quiet_environment({}, cluster=True)["PYTHONWARNINGS"]
    assert "RAY_AUTH_MODE" not in env_vars


def test_an_open_files_limit_the_launcher_cannot_raise_is_named_with_the_fix(monkeypatch):
    """A node whose hard limit is below what the launcher asks for (as the H100 node's was): one line with both
    limits and how to raise them; nothing when the raise works."""
    import io
    import resource

    from recipes.launch import training

    limits = {"now": (1024, 4096)}

    def setrlimit(_which, wanted):
        if wanted[1] > limits["now"][1]:
            raise ValueError("not allowed to raise maximum limit")  # what Linux answers a process without the right
        limits["now"] = wanted

    monkeypatch.setattr(resource, "getrlimit", lambda _which: limits["now"])
    monkeypatch.setattr(resource, "setrlimit", setrlimit)
    out = io.StringIO()
    training.raise_open_files_limit(out)
    assert out.getvalue().count("\n") == 1 and "open-files limit 4096 (hard limit 4096)" in out.getvalue()
    assert "ulimit -Hn" in out.getvalue()
    limits["now"] = (1024, 1 << 20)
    out = io.StringIO()
    training.raise_open_files_limit(out)
    assert out.getvalue() == "" and limits["now"][0] == training.OPEN_FILES
