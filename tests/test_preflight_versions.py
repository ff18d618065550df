"""The launch preflight's GPU-env checks: NVIDIA driver, installed versions against the lock, attention.

nvidia-smi is replaced by a small script on PATH (no GPU here); installed versions come either from this CPU
env's real metadata or from a dict built from the committed lock (standing for a correctly installed GPU env)."""

import subprocess
import sys
from importlib import metadata

import pytest

from recipes.preflight.checks import Report, run_all
from recipes.preflight.compose import compose_config
from recipes.preflight.facts import facts_of
from recipes.preflight.versions import (
    ATTN_KEY,
    GPU_LOCK,
    INSTALL_COMMAND,
    REPO_ROOT,
    attention_problems,
    check_gpu_env,
    driver_problem,
    query_driver,
    read_lock,
    version_problems,
)

pytestmark = pytest.mark.integration

H100_DRIVER = "580.159.04\n"  # what nvidia-smi printed on an H100 node
PINS = read_lock(GPU_LOCK)
LOCK = str(GPU_LOCK.relative_to(REPO_ROOT))  # as the messages show it


def locked_env(**changes):
    """An installed-version lookup for a GPU env exactly as locked, with `changes` (None: not installed)."""
    versions = {**PINS, **changes}
    return lambda name: versions.get(name)


# ---- driver ----------------------------------------------------------------------------------------------

def test_driver_580_passes_on_every_gpu():
    assert driver_problem(H100_DRIVER) is None
    assert driver_problem("580.159.04\n" * 8) is None


def test_the_oldest_driver_of_several_gpus_decides():
    problem = driver_problem("580.65.06\n535.104.05\n")
    assert problem.startswith("NVIDIA driver 535.104.05 found;") and ">= 580" in problem


@pytest.mark.parametrize(
    "output, start",
    [
        (None, "nvidia-smi not found, so the NVIDIA driver cannot be checked"),
        ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.",
         "cannot read the NVIDIA driver version from nvidia-smi (NVIDIA-SMI has failed"),
        ("", "cannot read the NVIDIA driver version from nvidia-smi (no output)"),
    ],
)
def test_no_readable_driver_is_an_error(output, start):
    assert driver_problem(output).startswith(start)


def _fake_smi(tmp_path, monkeypatch, script):
    (tmp_path / "nvidia-smi").write_text("#!/bin/sh\n" + script)
    (tmp_path / "nvidia-smi").chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")


def test_query_driver_asks_nvidia_smi_for_one_line_per_gpu(tmp_path, monkeypatch):
    _fake_smi(tmp_path, monkeypatch, '[ "$*" = "--query-gpu=driver_version --format=csv,noheader" ] || exit 9\n'
                                     "printf '580.159.04\\n575.57.08\\n'\n")
    output = query_driver()
    assert output == "580.159.04\n575.57.08\n"
    assert "575.57.08 found" in driver_problem(output)


def test_a_failing_nvidia_smi_is_reported_with_its_message(tmp_path, monkeypatch):
    _fake_smi(tmp_path, monkeypatch, "echo 'Failed to initialize NVML: Driver/library version mismatch' >&2; exit 18\n")
    assert "Driver/library version mismatch" in driver_problem(query_driver())


def test_without_nvidia_smi_there_is_nothing_to_query(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert query_driver() is None


# ---- versions against the lock ---------------------------------------------------------------------------

def test_an_env_installed_from_the_lock_passes():
    assert version_problems(GPU_LOCK, locked_env(), need_sglang=True) == []
    cuda_build = f"{PINS['torch']}+cu130"  # the same build from PyTorch's own index
    assert version_problems(GPU_LOCK, locked_env(torch=cuda_build), need_sglang=True) == []


@pytest.mark.parametrize(
    "changes, expected",
    [
        ({"torch": "2.13.0"}, f"torch 2.13.0 is installed but {LOCK} pins torch=={PINS['torch']}; "
                              f"reinstall the GPU env: {INSTALL_COMMAND}"),
        ({"torch": f"{PINS['torch']}+cpu"}, f"torch {PINS['torch']}+cpu is installed but {LOCK} pins torch=="),
        ({"transformers": "5.6.0"}, f"transformers 5.6.0 is installed but {LOCK} pins transformers=="),
        ({"verl": None}, f"verl is not installed; {LOCK} pins verl=={PINS['verl']}: {INSTALL_COMMAND}"),
        ({"sglang": None}, "sglang is not installed but actor_rollout_ref.rollout.name=sglang needs it; "
                           f"{LOCK} pins sglang=={PINS['sglang']}: {INSTALL_COMMAND}"),
    ],
)
def test_each_mismatch_is_one_line_naming_the_lock_and_the_install_command(changes, expected):
    (problem,) = version_problems(GPU_LOCK, locked_env(**changes), need_sglang=True)
    assert problem.startswith(expected)


def test_sglang_is_not_needed_by_another_rollout():
    assert version_problems(GPU_LOCK, locked_env(sglang=None), need_sglang=False) == []


def test_a_missing_or_partial_lock_is_reported(tmp_path):
    (problem,) = version_problems(tmp_path / "gpu.txt", locked_env(), need_sglang=True)
    assert problem.startswith(f"cannot read the GPU lock {tmp_path / 'gpu.txt'}")
    partial = tmp_path / "partial.txt"
    partial.write_text("verl==0.9.1 \\\n    --hash=sha256:" + "0" * 64 + "\n")
    assert len(version_problems(partial, locked_env(), need_sglang=True)) == 3  # no sglang, transformers, torch


def test_the_command_line_report_in_this_cpu_env():
    """This CPU test env is not the GPU env (a CPU torch, no sglang): the installer's last step says so."""
    proc = subprocess.run([sys.executable, "-m", "recipes.preflight.versions"], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    assert f"[versions] verl {metadata.version('verl')} (lock: {PINS['verl']})" in proc.stdout
    assert f"torch {metadata.version('torch')} is installed but {LOCK} pins torch=={PINS['torch']}" in proc.stderr
    assert "sglang is not installed" in proc.stderr


# ---- attention implementation ---------------------------------------------------------------------------

def test_verls_default_flash_attention_2_is_refused_without_flash_attn():
    errors, _ = attention_problems(None, 1, locked_env())
    assert errors == [f"{ATTN_KEY} is unset, so verl asks for flash_attention_2, but flash-attn is not installed "
                      f"(transformers would try to fetch a kernel from the hub at model load); set ++{ATTN_KEY}=sdpa"]


def test_sdpa_needs_nothing_else():
    assert attention_problems("sdpa", 1, locked_env()) == ([], [])


def test_flash_attention_4_is_installed_but_warned_about():
    errors, warnings = attention_problems("flash_attention_4", 1, locked_env())
    assert errors == [] and "compiled a new backward kernel on every call" in warnings[0]


def test_sequence_parallel_needs_a_flash_implementation():
    (error,), _ = attention_problems("sdpa", 2, locked_env())
    assert error.startswith("actor ulysses_sequence_parallel_size=2 needs a flash_attention_* implementation")


def test_flash_attn_2_beside_flash_attn_4_is_flagged():
    _, warnings = attention_problems("flash_attention_2", 1, locked_env(**{"flash-attn": "2.8.3"}))
    assert any("both installed" in w for w in warnings)


# ---- wired into the launch preflight ---------------------------------------------------------------------

def test_check_gpu_env_reads_the_recipe_config():
    config = compose_config([f"++{ATTN_KEY}=sdpa"])
    report = Report()
    check_gpu_env(config, report, installed=locked_env(), driver_output=H100_DRIVER * 8)
    assert (report.errors, report.warnings) == ([], [])
    assert report.notes == ["NVIDIA driver: 580.159.04 on 8 GPU(s) (CUDA 13 builds need >= 580)"]
    check_gpu_env(compose_config([f"++{ATTN_KEY}=flash_attention_2"]), report, installed=locked_env(sglang=None),
                  driver_output="550.54.15\n")
    assert [e.split(" ")[:2] for e in report.errors] == [["NVIDIA", "driver"], ["sglang", "is"], [ATTN_KEY, "is"]]


def test_a_real_launch_preflight_in_this_cpu_env_refuses(monkeypatch, tmp_path):
    """run_all(launch=True) with this env's real installed metadata and no nvidia-smi on PATH."""
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    monkeypatch.setenv("PREFLIGHT_VISIBLE_GPUS", "8")
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "no-cuda"))  # the CPU test env has no CUDA compiler
    report = run_all(facts_of(compose_config([])), launch=True)
    assert any(e.startswith("nvidia-smi not found") for e in report.errors)
    assert any(e.startswith(f"CUDA compiler: {tmp_path}/no-cuda/bin/nvcc (CUDA_HOME) not found") for e in report.errors)
    assert [n.split(":")[0] for n in report.notes if n.startswith("JIT caches")] == ["JIT caches"]
    assert f"torch {metadata.version('torch')} is installed but {LOCK} pins torch=={PINS['torch']}; " \
           f"reinstall the GPU env: {INSTALL_COMMAND}" in report.errors
    dry_run = run_all(facts_of(compose_config([])), launch=False)  # DRY_RUN: the env is not checked
    assert not [e for e in dry_run.errors if "nvidia-smi" in e or INSTALL_COMMAND in e]
