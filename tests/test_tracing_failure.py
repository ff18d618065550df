"""W&B unreachable or no key: the agent-loop worker's weave.init must not kill training. Each case runs
verl's own RolloutTraceConfig.init in a fresh process, as a worker does, after importing our tools."""

import os
import subprocess
import sys
import time

import pytest

WORKER = """
import logging, sys
logging.basicConfig(level=logging.WARNING, format="%(message)s")
import tools  # what verl's worker imports (tool classes) before it initialises tracing
from verl.utils.rollout_trace import RolloutTraceConfig, rollout_trace_op

RolloutTraceConfig.init("gsm8k-recipe-test", "exp", "weave", token2text=True)

class Loop:
    @rollout_trace_op
    async def run(self):
        return "rollout finished"

import asyncio
print("backend:", RolloutTraceConfig.get_backend())
print(asyncio.run(Loop().run()))
"""


def run_worker(repo_root, tmp_path, **env):
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB")}
    full_env.update({"HOME": str(tmp_path), "WANDB_ERROR_REPORTING": "false", "PYTHONPATH": str(repo_root),
                     "GSM8K_RECIPE_TRACE_INIT_TIMEOUT": "60", **env})
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", WORKER], env=full_env, capture_output=True, text=True,
                          timeout=150, stdin=subprocess.DEVNULL, cwd=tmp_path)
    return proc, time.perf_counter() - start


def test_no_key_turns_tracing_off_with_one_warning(repo_root, tmp_path):
    proc, _ = run_worker(repo_root, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "backend: None" in proc.stdout and "rollout finished" in proc.stdout
    assert proc.stderr.count("Weave tracing is OFF for this run: no WANDB_API_KEY") == 1


@pytest.mark.timeout(200)
def test_unreachable_wandb_turns_tracing_off(repo_root, tmp_path):
    # a closed port on this machine stands in for W&B being unreachable (no traffic leaves the machine)
    proc, seconds = run_worker(repo_root, tmp_path, WANDB_API_KEY="x" * 40, WANDB_BASE_URL="http://127.0.0.1:9")
    assert proc.returncode == 0, proc.stderr
    assert "backend: None" in proc.stdout and "rollout finished" in proc.stdout
    assert "Weave tracing is OFF for this run: weave.init('gsm8k-recipe-test') failed" in proc.stderr
    assert seconds < 120
