"""`-h` / `--help` on every script in scripts/ prints its usage and its knobs and changes nothing: no file made or
removed, no Python started but the one that lists the launcher's knobs from their declaration (recipes/launch/
knobs.py, with Python's own library only and no bytecode written). Each runs from a copy of the repo's scripts,
config and recipes, with every knob a script could act on pointed at a sentinel (work and output folders holding a
file that must survive, a venv folder that must not appear, a PYTHON and a PATH whose pythons, pip, uv and
nvidia-smi record that they were called)."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from recipes.constants import REPO_ROOT

pytestmark = pytest.mark.repo

# script -> knobs its --help must list as `NAME=${NAME...` lines (its own, or the launcher's it passes through)
KNOBS = {
    "run_gsm8k_grpo.sh": ("PROFILE", "DATA_DIR", "TOOL_SET", "MODEL_PATH", "OUTPUT_DIR", "TRACE_RELAY", "TRACE_SPOOL",
                          "DRY_RUN", "CHECK_ONLY"),
    "smoke_cpu.sh": ("PYTHON", "WORK_DIR", "OUTPUT_DIR", "GSM8K_DIR", "RESUME_CHECK", "NODES", "STOP_SECONDS"),
    "smoke_1gpu.sh": ("PYTHON", "WORK_DIR", "GSM8K_DIR", "DATA_DIR", "MODEL_PATH", "OUTPUT_DIR"),
    "eval_gsm8k.sh": ("DEVICE", "VAL_N", "VAL_TEMPERATURE", "PUBLISH", "MODEL_PATH", "DATA_DIR"),
    "submit_multinode.sh": ("OUTPUT_DIR", "PROFILE", "DATA_DIR"),
    "learn_cpu.sh": ("WORK_DIR", "SEED", "SFT_MODEL", "GRPO_STEPS", "CPU_ISA"),
    "learn_gpu.sh": ("WORK_DIR", "SEED", "SFT_MODEL", "GRPO_STEPS", "DEVICE", "DRY_RUN", "TASK", "PREPARE_ONLY",
                     "PREPARED"),
    "probe_gpu_step.sh": ("WORK_DIR", "PROFILE", "DEVICE", "DRY_RUN", "MODEL_PATH", "TOKENIZER_PATH", "MICRO_BATCH"),
    "setup_cpu_env.sh": ("VENV", "BASE_PYTHON"),
    "run_tests.sh": ("PYTHON", "PYTEST_WORKERS"),
    "install_gpu_env.sh": ("VENV", "BASE_PYTHON", "CHECK_DRIVER", "UV_DIR"),
    "check_gpu_kernels.sh": ("VENV", "BASE_PYTHON", "MAX_JOBS", "HEAD_DIMS", "FRESH"),
}
RECORDER = '#!/bin/sh\necho "$(basename "$0") $*" >> "$HELP_TEST_CALLS"\nexit 0\n'
# python3 runs for real for the knob listing alone (scripts/help.sh's HELP_KNOBS_FROM), everything else is recorded
KNOB_LISTING = "-B -S -m recipes.launch.knobs"
PYTHON3 = RECORDER.replace("\n", f'\ncase "$*" in "{KNOB_LISTING}"*) exec {sys.executable} "$@" ;; esac\n', 1)
RECORDED = ("python", "python3", "python3.11", "python3.12", "pip", "uv", "nvidia-smi", "ray", "nvcc")


def test_every_runnable_script_is_covered():
    runnable = {p.name for p in (REPO_ROOT / "scripts").glob("*.sh") if p.read_text().startswith("#!")}
    assert runnable == set(KNOBS), "a script without a --help test (or a test for a script that is gone)"


def snapshot(*roots: Path) -> dict[str, bytes]:
    return {str(p): (p.read_bytes() if p.is_file() else b"<dir>") for root in roots for p in sorted(root.rglob("*"))}


@pytest.fixture(scope="module")
def repo_copy(tmp_path_factory) -> Path:
    """What the scripts read or would write into: scripts/, config/, requirements/ (a launch writes nothing else),
    and recipes/, where the launcher's knobs are declared."""
    root = tmp_path_factory.mktemp("repo")
    for folder in ("scripts", "config", "requirements", "recipes"):
        shutil.copytree(REPO_ROOT / folder, root / folder, ignore=shutil.ignore_patterns("__pycache__"))
    return root


@pytest.mark.parametrize("flag", ["--help", "-h"])
@pytest.mark.parametrize("script", sorted(KNOBS))
def test_help_prints_the_usage_and_the_knobs_and_changes_nothing(repo_copy, tmp_path, script, flag):
    bin_dir, calls = tmp_path / "bin", tmp_path / "calls.log"
    bin_dir.mkdir()
    for name in RECORDED:
        (bin_dir / name).write_text(PYTHON3 if name == "python3" else RECORDER)
        (bin_dir / name).chmod(0o755)
    work, out, home, scratch = (tmp_path / name for name in ("work", "out", "home", "tmp"))
    for folder in (work / "model_sft", out / "checkpoints", out / "logs", home, scratch):
        folder.mkdir(parents=True)
        (folder / "sentinel").write_text("must survive")
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(home), "TMPDIR": str(scratch),
           "HELP_TEST_CALLS": str(calls), "PYTHON": str(bin_dir / "python3"), "WORK_DIR": str(work),
           "OUTPUT_DIR": str(out), "VENV": str(tmp_path / "venv"), "DATA_DIR": str(tmp_path / "data"),
           "RAY_ADDRESS": "http://127.0.0.1:1", "CHECK_DRIVER": "0", "SFT_MODEL": str(work / "model_sft")}
    before = snapshot(repo_copy, work, out, home, scratch)
    # the flag after an override, as a user adds it to a command line they already have
    proc = subprocess.run(["bash", str(repo_copy / "scripts" / script), "trainer.total_epochs=1", flag], env=env,
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)

    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not calls.exists(), f"--help ran: {calls.read_text()}"
    assert snapshot(repo_copy, work, out, home, scratch) == before
    assert not (tmp_path / "venv").exists() and not (tmp_path / "data").exists()
    lines = proc.stdout.splitlines()
    assert lines[0] == f"scripts/{script}:"
    first_comment = (REPO_ROOT / "scripts" / script).read_text().splitlines()[1].removeprefix("# ")
    assert lines[1].strip() == first_comment.strip()  # the header: what the script does
    listed = {line.split("=", 1)[0].strip() for line in lines if "=${" in line.split(" #")[0]}
    assert set(KNOBS[script]) <= listed, proc.stdout


def test_without_help_the_hook_does_nothing(tmp_path):
    """The sourced hook, given other arguments, returns to its script with no output."""
    script = tmp_path / "s.sh"
    script.write_text(f'#!/usr/bin/env bash\n# header\n. "{REPO_ROOT}/scripts/help.sh" "$@"\necho "ran with $*"\n')
    proc = subprocess.run(["bash", str(script), "trainer.x=1", "--helpful"], capture_output=True, text=True,
                          timeout=30, env={"PATH": os.environ["PATH"]})
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "ran with trainer.x=1 --helpful\n", "")
