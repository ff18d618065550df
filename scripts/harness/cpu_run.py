"""A CPU run of the recipe as a user starts one: `scripts/cpu_env.sh` sourced, then `scripts/run_gsm8k_grpo.sh`
with PROFILE=cpu_smoke, the tiny random Qwen2 model and a few GSM8K rows (as scripts/smoke_cpu.sh prepares them),
in its own session, its output in a log file that a caller can follow while it runs: the tests and the benchmark
that stop a run mid-step (tests/test_preempt.py, scripts/bench_preempt.py)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from recipes.constants import REPO_ROOT

STEP_LINE = re.compile(r"\bstep:(\d+) - ")  # verl's console logger: one line per trained step, at its end
# for launches on the first few GSM8K rows, each far under the prompt limit: verl's overlong filter (its own test:
# tests/test_data_prep_verl.py) would drop none and costs each launch's start ~10 s a file on 2 cores
NO_LENGTH_FILTER = "data.filter_overlong_prompts=false"
# a user's shell settings that would change what the launcher does
_NOT_PASSED_ON = ("RAY_", "VERL_", "OUTPUT_DIR", "PROFILE", "DATA_DIR", "MODEL_PATH", "EXPERIMENT_NAME", "SUBMIT",
                  "DRY_RUN", "N_GPUS_PER_NODE", "NNODES", "TOOL_SET", "WANDB_", "WF_", "WEAVE_", "TRACE",
                  "GSM8K_RECIPE_", "LOGGER", "STOP_WAIT_MINUTES", "STALL_", "SLURM_")


def prepare(work: Path, gsm8k_dir: Path, train_rows: int = 6, test_rows: int = 4) -> tuple[Path, Path]:
    """(model dir, data dir) under `work`: the CPU smoke's model and rows."""
    from data_prep import gsm8k
    from harness.qwen_tokenizer import build_tiny_qwen2_model_dir

    model, data = work / "model", work / "data"
    build_tiny_qwen2_model_dir(str(model))
    assert gsm8k.main(["--input_dir", str(gsm8k_dir), "--train_size", str(train_rows), "--test_size",
                       str(test_rows), "--local_save_dir", str(data)]) == 0
    return model, data


def environment(model: Path, data: Path, output: Path, **env: str) -> dict[str, str]:
    kept = {k: v for k, v in os.environ.items() if not k.startswith(_NOT_PASSED_ON)}
    return {**kept, "PYTHON": sys.executable, "PROFILE": "cpu_smoke", "MODEL_PATH": str(model),
            "DATA_DIR": str(data), "OUTPUT_DIR": str(output), "HF_HUB_OFFLINE": "1", **env}


def start(env: dict[str, str], log: Path, *overrides: str) -> subprocess.Popen:
    """The launch, as `source scripts/cpu_env.sh; bash scripts/run_gsm8k_grpo.sh OVERRIDES` (the launcher keeps the
    shell's pid: both scripts exec); stdout and stderr to `log`."""
    command = 'source scripts/cpu_env.sh && exec bash scripts/run_gsm8k_grpo.sh "$@"'
    with open(log, "wb") as handle:
        return subprocess.Popen(["bash", "-c", command, "launch", *overrides], cwd=REPO_ROOT, env=env,
                                stdout=handle, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)


def wait_for(log: Path, pattern: str, proc: subprocess.Popen | None, timeout_s: float) -> re.Match:
    """The first match of `pattern` in the log as it grows; fails if the process ends or time runs out first."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        match = re.search(pattern, log.read_text(errors="replace") if log.exists() else "")
        if match:
            return match
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"the run ended ({proc.returncode}) before '{pattern}':\n{tail(log)}")
        time.sleep(0.2)
    raise AssertionError(f"no '{pattern}' within {timeout_s:.0f} s:\n{tail(log)}")


def steps(text: str) -> list[int]:
    return [int(n) for n in STEP_LINE.findall(text)]


def tail(log: Path, chars: int = 6000) -> str:
    return log.read_text(errors="replace")[-chars:] if log.exists() else f"({log} not written)"


def kill_session(sid: int) -> None:
    """Everything a launch started (Ray's processes included) runs in its session."""
    for pid in (int(p) for p in os.listdir("/proc") if p.isdigit()):
        try:
            if os.getsid(pid) == sid:
                os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
