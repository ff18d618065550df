"""scripts/learn_gpu.sh end to end here, at a tiny size: its DRY_RUN as a user runs it before a GPU run (the task,
the data, the tokenizer, the model and its SGLang check, the composed gpu_learn config and the plan; nothing trains),
and DEVICE=cpu, every stage of the GPU pipeline on the CPU stand-ins (hf_cpu serves the SGLang-shaped model): the
SFT, ONE launch of the recipe's launcher validating before and after on both files, the scores read from the two
validations and held equal to verl's own metrics per data_source, the verdict line, the RESULT line last. Steering
(hf_cpu's steer_every) makes calls happen at this size (in tools-on rows: the stand-in steers prompts that offer a
tool). Its pieces: tests/test_gpu_learning.py."""

import json
import os
import re
import subprocess
import sys

import pytest

from recipes.constants import REPO_ROOT

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]
TEST_ROWS, GRPO_STEPS = 4, 1
_NOT_PASSED_ON = ("RAY_", "VERL_", "WORK_DIR", "OUTPUT_DIR", "PROFILE", "DATA_DIR", "MODEL_PATH", "EXPERIMENT_NAME",
                  "DRY_RUN", "DEVICE", "LOGGER", "TRACE", "SFT_", "TASK", "SEED", "GRPO_STEPS", "TRAIN_ROWS",
                  "TEST_ROWS", "MAX_TURNS", "RESPONSE_LENGTH", "EVAL_TEMPERATURE", "THREADS", "VERL_FILE_LOGGER")
RESULT = re.compile(r"^RESULT sft_acc=(\S+) final_acc=(\S+) tools_off_acc=(\S+) tool_call_rate=(\S+) "
                    r"tool_calls_per_trajectory=(\S+) turns_mean=(\S+) steps=(\d+) wall_s=(\d+)$")


def learn_gpu(work, *args, **env):
    base = {k: v for k, v in os.environ.items() if not k.startswith(_NOT_PASSED_ON)}
    tiny = {"PYTHON": sys.executable, "WORK_DIR": str(work), "TRAIN_ROWS": "48", "TEST_ROWS": str(TEST_ROWS),
            "SFT_STEPS": "4", "SFT_TOOL_ONLY_STEPS": "2", "SFT_CONVERGED_LOSS": "100", "GRPO_STEPS": str(GRPO_STEPS)}
    # one stream, as a log of the run holds it
    return subprocess.run(["bash", str(REPO_ROOT / "scripts" / "learn_gpu.sh"), *args], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=840, env={**base, **tiny, **env},
                          stdin=subprocess.DEVNULL)


def stages(text: str) -> list[str]:
    return [m.group(1) for m in re.finditer(r"^\[learn_gpu\] stage: (.*?) \(\d+ s\)$", text, re.M)]


def test_the_dry_run_shows_task_data_model_config_and_plan_and_trains_nothing(tmp_path):
    work = tmp_path / "work"
    proc = learn_gpu(work, DRY_RUN="1")
    out = proc.stdout
    assert proc.returncode == 0, out[-3000:]
    assert stages(out) == ["task and data (tools on and tools off)", "tokenizer and model",
                           "launcher DRY_RUN: the composed config and the plan"]
    assert "8 heads x 64, 2 KV heads: 657,536 parameters" in out  # the SGLang shape, built from the task's rows
    assert re.search(r"^\[preflight\] model: head_dim 64, 8 heads / 2 KV heads, vocab 1024 >= \d+ tokens, context "
                     r"1024: SGLang and FlashInfer serve it, tool tags one token each$", out, re.M), out[-3000:]
    assert "DRY_RUN=1: preflight passed, nothing started; the launch would run (profile gpu_learn)" in out
    assert re.search(r"hardware +1 node\(s\) x 1 GPU\(s\); rollout sglang", out)
    assert f"validation ['{work}/data/test.parquet', '{work}/data_notools/test.parquet']" in out
    assert re.search(rf"schedule +{GRPO_STEPS} steps \(trainer.total_training_steps\); validation every {GRPO_STEPS} "
                     r"steps", out)
    config = (work / "outputs" / "launch_config.yaml").read_text()
    assert "filter_overlong_prompts: false" in config and "cuda_graph_max_bs: 64" in config
    assert not (work / "model_sft").exists() and not (work / "outputs" / "validation").exists()
    assert sorted(p.name for p in work.iterdir()) == ["data", "data_notools", "model_init", "outputs", "task"]


def test_on_cpu_every_stage_runs_in_one_launch_and_the_result_line_comes_last(tmp_path):
    work = tmp_path / "work"
    proc = learn_gpu(work, "actor_rollout_ref.rollout.engine_kwargs.hf_cpu.steer_every=2", DEVICE="cpu")
    out = proc.stdout
    assert proc.returncode == 0, out[-4000:]
    assert stages(out) == ["task and data (tools on and tools off)", "tokenizer, model and SFT warm start",
                           f"GRPO launch: {GRPO_STEPS} steps, validation before and after, tools on and off",
                           "scores from the two validations"]
    assert "SGLang and FlashInfer serve it" in out and "[sft] on cpu" in out
    assert out.count("Total training steps: ") == 1  # ONE launch of the trainer
    *_, verdict, result = out.strip().splitlines()  # the last line is RESULT, the verdict's just before it
    assert re.fullmatch(r"VERDICT (PASS|FAIL) \(one_step task\)", verdict), verdict
    match = RESULT.match(result)
    assert match, result
    assert int(match.group(7)) == GRPO_STEPS
    # the RESULT's numbers are the two validations' (validation_scores), which agree with verl's metrics
    assert f"step {GRPO_STEPS}: the validation dump's scores are verl's metrics per data_source" in out
    metrics = {json.loads(line)["step"]: json.loads(line)["data"]
               for line in (work / "outputs" / "metrics.jsonl").read_text().splitlines()}
    for step in (0, GRPO_STEPS):
        for source in ("openai/gsm8k", "openai/gsm8k_no_tools"):
            assert f"val-core/{source}/acc/mean@1" in metrics[step], (step, sorted(metrics[step]))
    scores = {name: json.loads((work / "scores" / f"{name}.json").read_text())
              for name in ("sft", "final", "final_tools_off")}
    assert float(match.group(1)) == round(scores["sft"]["strict_acc"], 4)
    assert float(match.group(3)) == round(metrics[GRPO_STEPS]["val-core/openai/gsm8k_no_tools/acc/mean@1"], 4)
    assert float(match.group(4)) == round(metrics[GRPO_STEPS]["val-aux/openai/gsm8k/called_tool/mean@1"], 4)
    assert scores["final"]["answers"] == scores["final_tools_off"]["answers"] == TEST_ROWS
    # the launch's workers ran the tools-off rows in the loop that offers no tools: no tool block in their prompts
    dump = [json.loads(line) for line in (work / "outputs" / "validation" / f"{GRPO_STEPS}.jsonl").read_text()
            .splitlines()]
    assert {("<tools>" in line["input"], line["tool_set"]) for line in dump} == {(True, "calculator"), (False, "none")}
    assert {p.name for p in work.iterdir()} >= {"task", "data", "data_notools", "model_init", "model_sft",
                                                "outputs", "scores"}
