"""scripts/learn_cpu.sh as users run it, in a subprocess: the knobs it refuses in one line and what it changes then
(nothing), the warm start it keeps, the sizes it hands the SFT and the CPU kernels it pins in every process it starts.
The steps themselves run on a stand-in interpreter that notes its arguments (below); the pieces they run:
tests/test_cpu_learning.py."""

import os
import sys

import pytest

from recipes import folder_guard

pytestmark = pytest.mark.integration


def _stub_python(tmp_path):
    """A stand-in for the interpreter learn_cpu.sh hands its knobs to: the pipeline itself (`-m
    harness.learning`) runs on the real one; every step it starts (task, data prep, model, SFT) does nothing
    but note its arguments and the kernel pins in its environment (tmp_path/calls.txt, one line each), and the first
    evaluation (eval_gsm8k.sh's launcher, `python -m recipes.launch`) fails, so the check stops right after it has
    set up the warm start. The script's own check that the interpreter has verl (scripts/python_env.sh, `-c`) passes
    and is not noted: it is no step of the check."""
    stub = tmp_path / "python"
    stub.write_text('#!/usr/bin/env bash\n'
                    'if [ "$1" = -c ]; then exit 0; fi\n'
                    f'if [ "$1 $2" = "-m harness.learning" ]; then exec {sys.executable} "$@"; fi\n'
                    f'echo "$* | ISA=${{ATEN_CPU_CAPABILITY:-}},${{MKL_CBWR:-}},${{MKL_ENABLE_INSTRUCTIONS:-}}" '
                    f'>> {tmp_path / "calls.txt"}\n'
                    'case "$*" in *recipes.launch*) exit 7 ;; esac\nexit 0\n')
    stub.chmod(0o755)
    return stub


def _stub_calls(tmp_path, module: str) -> list[tuple[list[str], str]]:
    """(arguments, kernel pins) of each call the stand-in interpreter got for `module`."""
    lines = (tmp_path / "calls.txt").read_text().splitlines()
    return [(args.split(), isa) for args, isa in (line.rsplit(" | ISA=", 1) for line in lines) if module in args]


def _learn_cpu(tmp_path, **env):
    import subprocess

    from recipes.constants import REPO_ROOT

    base = {k: v for k, v in os.environ.items() if not k.startswith(("ATEN_", "MKL_"))}
    return subprocess.run(["bash", str(REPO_ROOT / "scripts" / "learn_cpu.sh")], capture_output=True, text=True,
                          timeout=60, env={**base, "PYTHON": str(_stub_python(tmp_path)), **env})


def test_learn_cpu_keeps_an_sft_model_that_lies_inside_the_work_dir_it_clears(tmp_path):
    """The documented `SFT_MODEL=<WORK_DIR>/model_sft bash scripts/learn_cpu.sh`: the warm start survives the
    clearing of WORK_DIR (it used to be deleted first: `cp: cannot stat`, the SFT lost)."""
    work = folder_guard.claim(tmp_path / "work", "learn_cpu")  # the last run's work dir
    (work / "model_sft").mkdir(parents=True)
    (work / "model_sft" / "config.json").write_text('{"model_type": "qwen2"}')
    (work / "model_sft" / "model.safetensors").write_bytes(b"weights")
    (work / "stale.txt").write_text("from the last run")
    proc = _learn_cpu(tmp_path, WORK_DIR=str(work), SFT_MODEL=str(work / "model_sft"))
    assert "SFT: skipped" in proc.stderr, proc.stderr
    assert "cannot stat" not in proc.stderr
    assert (work / "model_sft" / "model.safetensors").read_bytes() == b"weights"
    assert not (work / "stale.txt").exists()  # the rest of the work dir is still cleared


def test_learn_cpu_refuses_an_sft_model_that_is_not_a_model_and_changes_nothing(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    (work / "kept.txt").write_text("last run")
    proc = _learn_cpu(tmp_path, WORK_DIR=str(work), SFT_MODEL=str(tmp_path / "typo"))
    assert proc.returncode == 1
    assert "is not a model folder" in proc.stderr and "nothing was changed" in proc.stderr
    assert (work / "kept.txt").exists()


@pytest.mark.parametrize("task_name", ["one_step", "chain"])
def test_learn_cpu_gives_the_sft_numbers_for_either_task(tmp_path, task_name):
    """Every size the SFT gets is a number (the chain task's defaults once reached it as unfilled names)."""
    proc = _learn_cpu(tmp_path, WORK_DIR=str(tmp_path / "work"), TASK=task_name)
    [(args, _)] = _stub_calls(tmp_path, "harness.learning.sft")
    sizes = {flag: args[args.index(flag) + 1] for flag in ("--steps", "--tool_only_steps", "--tool_fraction",
                                                             "--converged_loss", "--batch_size", "--lr",
                                                             "--schedule_steps")}
    assert all(float(v) > 0 for v in sizes.values()), (sizes, proc.stderr)
    assert int(sizes["--steps"]) > int(sizes["--tool_only_steps"])  # a mixed phase follows the tool-only one
    assert int(sizes["--schedule_steps"]) >= int(sizes["--steps"])  # the cosine ends at or after the last step
    # the chain's copy plateau is left with weight decay; the one-step check's warm start stays as documented
    assert float(args[args.index("--weight_decay") + 1]) == (0.1 if task_name == "chain" else 0.0)
    [(task_args, _)] = _stub_calls(tmp_path, "harness.learning.task")
    assert task_args[task_args.index("--task") + 1] == task_name
    turns = _stub_calls(tmp_path, "harness.learning.turn_accuracy")  # the chain's warm start, turn by turn
    assert [args[args.index("--model_dir") + 1] for args, _ in turns] == (
        [str(tmp_path / "work" / "model_sft")] if task_name == "chain" else [])


@pytest.mark.parametrize(("cpu_isa", "pins"), [(None, "avx2,AVX2,AVX2"), ("avx512", "avx512,AVX512,AVX512"),
                                              ("native", ",,")])
def test_learn_cpu_pins_the_cpu_kernels_of_every_process(tmp_path, cpu_isa, pins):
    """The warm start's arithmetic depends on the instruction set torch's and MKL's kernels use (docs/testing.md,
    "What makes two runs of one seed differ"): pinned by default for every process the script starts; native leaves
    the CPU's best."""
    env = {"WORK_DIR": str(tmp_path / "work")} | ({} if cpu_isa is None else {"CPU_ISA": cpu_isa})
    _learn_cpu(tmp_path, **env)
    calls = _stub_calls(tmp_path, "")
    assert {"harness.learning.sft", "recipes.launch"} <= {a for args, _ in calls for a in args}
    assert {isa for _, isa in calls} == {pins}


def test_learn_cpu_refuses_an_unknown_instruction_set(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    (work / "kept.txt").write_text("last run")
    proc = _learn_cpu(tmp_path, WORK_DIR=str(work), CPU_ISA="sse9")
    assert proc.returncode == 1 and "CPU_ISA must be avx2, avx512 or native, not 'sse9'" in proc.stderr
    assert (work / "kept.txt").exists() and not (tmp_path / "calls.txt").exists()
