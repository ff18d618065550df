"""The GPU checks' own runs, rehearsed on the CPU stand-ins at a tiny size: one launch of the recipe's launcher each.
scripts/learn_gpu.sh from its prepared folder (PREPARED=<folder> DEVICE=cpu: the GPU part, hf_cpu serving the
SGLang-shaped model; validations before and after on both files, the scores read from them and held equal to verl's
own metrics per data_source, the verdict line, the RESULT line last; steering (hf_cpu's steer_every) makes calls
happen at this size), and scripts/probe_gpu_step.sh DEVICE=cpu (random weights written, one step with every response
run to its limit, the GPU's memory sampler started (no nvidia-smi here), the report from verl's own metrics and the
PROBE line last). Benchmarks' own checks, not in the suite: `bash scripts/run_tests.sh -m bench`. What runs before a
GPU, in the suite: tests/test_gpu_learning_e2e.py and tests/test_gpu_probe_e2e.py."""

import json
import re

import pytest

from test_gpu_learning_e2e import GRPO_STEPS, RESULT, TEST_ROWS, learn_gpu, prepare
from test_gpu_learning_e2e import stages as learn_stages
from test_gpu_probe_e2e import PROBE, probe
from test_gpu_probe_e2e import stages as probe_stages

pytestmark = [pytest.mark.bench, pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    work, proc = prepare(tmp_path_factory.mktemp("prepare") / "work")
    assert proc.returncode == 0, proc.stdout[-4000:]
    return work, proc

def test_from_the_prepared_folder_on_cpu_one_launch_runs_and_the_result_line_comes_last(prepared, tmp_path):
    folder = prepared[0] / "prepared"
    work = tmp_path / "work"
    proc = learn_gpu(work, "actor_rollout_ref.rollout.engine_kwargs.hf_cpu.steer_every=2", DEVICE="cpu",
                     PREPARED=str(folder))
    out = proc.stdout
    assert proc.returncode == 0, out[-4000:]
    assert learn_stages(out) == [f"prepared folder {folder}: manifest, recipe version, knobs, checksums",
                           f"GRPO launch: {GRPO_STEPS} steps, validation before and after, tools on and off",
                           "scores from the two validations"]
    assert "[sft]" not in out and "SGLang and FlashInfer serve it" in out  # no SFT; the folder's model checked
    assert "composed for DEVICE=gpu; this run composes its own for DEVICE=cpu" in out
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
    # it read the folder and wrote only under its own WORK_DIR
    assert sorted(p.name for p in work.iterdir()) == ["outputs", "scores"]
    assert json.loads((folder / "manifest.json").read_text())["made_with"]["SEED"] == "0"


def test_on_cpu_one_step_runs_to_the_length_limit_and_the_probe_line_comes_last(tmp_path):
    work = tmp_path / "work"
    proc = probe(work, DEVICE="cpu")
    out = proc.stdout
    assert proc.returncode == 0, out[-4000:]
    assert probe_stages(out) == ["the share of 8xh100 one GPU runs", "GSM8K rows for one step", "tokenizer and model",
                                 "the launch: SGLang's start and one GRPO step", "the report"]
    assert "one GPU runs 2 prompts, 4 trajectories" in out and "model: random weights of tiny" in out
    assert out.count("Total training steps: ") == 1  # ONE launch of the trainer, one step
    match = PROBE.match(out.strip().splitlines()[-1])
    assert match, out[-3000:]
    step, gen, old, ref, update = (float(match[name]) for name in ("step", "gen", "old", "ref", "update"))
    assert step > 0 and all(0 < part < step for part in (gen, old, ref, update))
    metrics = {json.loads(line)["step"]: json.loads(line)["data"]
               for line in (work / "outputs" / "metrics.jsonl").read_text().splitlines()}
    assert float(match["step"]) == round(metrics[1]["timing_s/step"], 1)
    # every response ran to its limit: ignore_eos reached the stand-in as SGLang's server default
    assert metrics[1]["response_length/mean"] == 16 and metrics[1]["response_length/clip_ratio"] == 1
    assert "by nvidia-smi: no nvidia-smi on PATH (no GPU)" in out and match["sglang"] == "nan"
    assert float(match["run_h"]) == round(435 * metrics[1]["timing_s/step"] / 3600, 2)
    # the projection: each phase with what it scales; the node's actor peak from the memory plan, not from this run
    assert (match["mb"], match["lp"]) == ("2", "2") and float(match["node"]) > 0 and float(match["planned"]) > 0
    for phase in ("generation", "old log-probs", "reference", "update", "weight sync", "the rest"):
        assert re.search(rf"^\[probe\]   {phase} +\d+\.\d s  (1:1|an upper bound)", out, re.M), phase
    assert re.search(r"^\[probe\]   the actor's peak ~\d+\.\d GiB a GPU \(training, micro-batch 16, 1/8 of the "
                     r"state, nothing offloaded\): the memory plan's for the node", out, re.M)
