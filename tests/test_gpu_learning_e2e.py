"""scripts/learn_gpu.sh end to end here, at a tiny size, up to its seam as a user runs it before a GPU node:
PREPARE_ONLY=1 (the task, the data, the tokenizer, the warm start trained on the CPU, its SGLang check and CPU score,
the composed gpu_learn config and the plan through the launcher's DRY_RUN, all in WORK_DIR/prepared with its manifest;
nothing trains with GRPO), made once for the module; then a folder that does not match the knobs refused in one line.
The GPU part from that folder, rehearsed on the CPU stand-ins (one launch): tests/test_gpu_checks_on_cpu.py, a
benchmark's own check (`-m bench`). Its pieces: tests/test_gpu_learning.py."""

import json
import os
import re
import subprocess
import sys

import pytest

from recipes.constants import REPO_ROOT

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]
TEST_ROWS, GRPO_STEPS = 4, 1
_NOT_PASSED_ON = ("RAY_", "VERL_", "WORK_DIR", "OUTPUT_DIR", "PROFILE", "DATA_DIR", "MODEL_PATH", "EXPERIMENT_NAME",
                  "DRY_RUN", "DEVICE", "LOGGER", "TRACE", "SFT_", "TASK", "SEED", "GRPO_STEPS", "TRAIN_ROWS",
                  "TEST_ROWS", "MAX_TURNS", "RESPONSE_LENGTH", "EVAL_TEMPERATURE", "THREADS", "VERL_FILE_LOGGER",
                  "PREPARE")
RESULT = re.compile(r"^RESULT sft_acc=(\S+) final_acc=(\S+) tools_off_acc=(\S+) tool_call_rate=(\S+) "
                    r"tool_calls_per_trajectory=(\S+) turns_mean=(\S+) steps=(\d+) wall_s=(\d+)$")


def learn_gpu(work, *args, **env):
    base = {k: v for k, v in os.environ.items() if not k.startswith(_NOT_PASSED_ON)}
    tiny = {"PYTHON": sys.executable, "WORK_DIR": str(work), "TRAIN_ROWS": "48", "TEST_ROWS": str(TEST_ROWS),
            "SFT_STEPS": "4", "SFT_TOOL_ONLY_STEPS": "2", "SFT_CONVERGED_LOSS": "100", "GRPO_STEPS": str(GRPO_STEPS)}
    # one stream, as a log of the whole command holds it
    return subprocess.run(["bash", str(REPO_ROOT / "scripts" / "learn_gpu.sh"), *args], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=840, env={**base, **tiny, **env},
                          stdin=subprocess.DEVNULL)


def stages(text: str) -> list[str]:
    return [m.group(1) for m in re.finditer(r"^\[learn_gpu\] stage: (.*?) \(\d+ s\)$", text, re.M)]


def prepare(work):
    """PREPARE_ONLY=1 as on a CPU machine before the GPU (DEVICE left at gpu: the gpu_learn config is composed)."""
    return work, learn_gpu(work, PREPARE_ONLY="1")


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    return prepare(tmp_path_factory.mktemp("prepare") / "work")


def test_prepare_only_leaves_a_small_self_describing_folder_and_trains_no_grpo(prepared):
    work, proc = prepared
    out = proc.stdout
    assert proc.returncode == 0, out[-4000:]
    assert stages(out) == ["task and data (tools on and tools off)", "tokenizer, model and SFT warm start on cpu",
                           "the warm start scored on the CPU (tools on)",
                           "the prepared folder and the launcher's DRY_RUN from it (gpu_learn profile)"]
    assert "8 heads x 64, 2 KV heads: 657,536 parameters" in out  # the SGLang shape, built from the task's rows
    assert "[sft] on cpu" in out
    # the launcher's DRY_RUN on the folder's own paths: the preflight's SGLang check, the plan, the composed config
    folder = work / "prepared"
    assert re.search(r"^\[preflight\] model: head_dim 64, 8 heads / 2 KV heads, vocab 1024 >= \d+ tokens, context "
                     r"1024: SGLang and FlashInfer serve it, tool tags one token each$", out, re.M), out[-3000:]
    assert "DRY_RUN=1: preflight passed, nothing started; the launch would run (profile gpu_learn)" in out
    assert re.search(r"hardware +1 node\(s\) x 1 GPU\(s\); rollout sglang", out)
    assert f"validation {folder}/data/test.parquet,{folder}/data_notools/test.parquet" in out
    assert re.search(rf"schedule +{GRPO_STEPS} steps \(trainer.total_training_steps\); validation every {GRPO_STEPS} "
                     r"steps", out)
    config = (folder / "launch_config.yaml").read_text()
    assert "filter_overlong_prompts: false" in config and "cuda_graph_max_bs: 64" in config
    # the last line, and what it says is what the folder holds
    match = re.fullmatch(r"PREPARED folder=(\S+) bytes=(\d+) files=(\d+) sft_acc_cpu=(\S+) sft_attempts=1 "
                         r"wall_s=\d+", out.strip().splitlines()[-1])
    assert match and match.group(1) == str(folder), out[-2000:]
    files = sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())
    assert int(match.group(2)) == sum((folder / f).stat().st_size for f in files) < 4 * 2**20
    manifest = json.loads((folder / "manifest.json").read_text())
    assert sorted(manifest["files"]) == [f for f in files if f != "manifest.json"] and int(match.group(3)) == len(
        manifest["files"])
    assert {"data/train.parquet", "data/test.parquet", "data_notools/test.parquet", "launch_config.yaml",
            "model_sft/model.safetensors", "model_sft/config.json", "model_sft/tokenizer.json"} <= set(files)
    assert manifest["made_with"]["SEED"] == "0" and manifest["made_with"]["TRAIN_ROWS"] == "48"
    assert (manifest["sft_device"], manifest["composed_for"], manifest["sft_attempts"]) == (
        "cpu", {"device": "gpu", "profile": "gpu_learn"}, 1)
    assert float(match.group(4)) == round(manifest["sft_acc_cpu"], 4)
    assert not (work / "outputs" / "validation").exists()  # no GRPO, no validation


@pytest.mark.parametrize("knobs, said", [
    ({"SEED": "1"}, "was made with SEED=0, not SEED=1: run with its knobs, or prepare again with these"),
    ({"SFT_STEPS": "5", "TRAIN_ROWS": "49"}, "was made with TRAIN_ROWS=48 SFT_STEPS=4, not TRAIN_ROWS=49 SFT_STEPS=5"),
])
def test_a_prepared_folder_made_with_other_knobs_is_refused_in_one_line_and_nothing_changes(prepared, tmp_path,
                                                                                               knobs, said):
    folder = prepared[0] / "prepared"
    work = tmp_path / "work"
    work.mkdir()
    (work / "kept.txt").write_text("last run")
    proc = learn_gpu(work, DEVICE="cpu", PREPARED=str(folder), **knobs)
    last = proc.stdout.strip().splitlines()[-1]
    assert proc.returncode == 1 and last.startswith(f"[learn_gpu] error: PREPARED={folder} {said}"), proc.stdout[-2000:]
    assert [p.name for p in work.iterdir()] == ["kept.txt"]
