"""Does the launch fit the GPUs, the model and the data it names? The dry run's memory plan (recipes/preflight/
memory.py) against the one GPU measurement and the profiles' GPUs, and the mistakes a dry run refuses in one line
before anything starts: a hub id with a typo (the hub asked when it may be, the local cache when not), a schedule
of no step, a GPU count the batch does not divide, contradictory trace knobs, a resume of another run's
checkpoints."""

import os
import subprocess
import sys

import pytest

import record_measured as measured
from recipes.constants import REPO_ROOT
from recipes.launch.knobs import KnobError, Knobs
from recipes.models import model_size
from recipes.preflight.compose import compose_config
from recipes.preflight.findings import Report
from recipes.preflight.hub_model import check_hub_model
from recipes.preflight.memory import GIB, MICRO_KEYS, check_memory, gpu_memory, plan_memory, train_activation_bytes
from testkit.hf_cache import HubAPI, write_cached_model, write_hub_cache
from testkit.launcher import clean_environ, plan, run_script

pytestmark = pytest.mark.integration

QWEN_3B, TYPO = "Qwen/Qwen2.5-3B-Instruct", "Qwen/Qwen2.5-3b-instruct"


def figure(name: str) -> float:
    return float(next(f.value for f in measured.read_page(measured.PAGE) if f.name == name))


def test_the_plan_matches_the_one_gpu_measurement():
    """The 1-GPU smoke (0.5B shape, micro-batches of 4 trajectories of ~880 tokens: ~3.5k packed tokens) peaked at
    verl's actor/perf/max_memory_allocated_gb; the plan's actor at that shape (shards, gathered blocks, activations)
    is within 10% of it."""
    config = compose_config(["profile=1gpu_smoke"])
    size, _ = model_size("Qwen/Qwen2.5-0.5B-Instruct")
    plan = plan_memory(config, size, "table", 79.2, "the smoke's H100")
    gathered = (2 * 2 * 2 * size.layer_parameters + 2 * size.embedding_parameters) / GIB
    actor = plan.params + plan.grads + plan.adam + gathered + train_activation_bytes(config, size, 4 * 880) / GIB
    assert actor == pytest.approx(figure("h100_smoke_actor_peak_gb"), rel=0.10)


def test_the_dry_run_prints_a_memory_row_per_gpu(default_dry_run):
    row = default_dry_run.row("memory")
    assert row.startswith("~52 of 80 GB a GPU at its peak, training (an estimate: docs/configuration.md#memory): "
                          "FSDP shards 5.7 GB (params 1.4, grads 1.4, Adam 2.9; full fine-tuning; the reference model "
                          "on the CPU), activations ~42 GB at 16 x 2048 tokens (checkpointing on); SGLang "), row
    assert "released while the actor computes; 80 GB: GPU_MEMORY_GB's default, no nvidia-smi here" in row
    assert row.endswith("3.09B parameters from config.json in the HF cache")


def test_3b_full_fine_tuning_on_one_gpu_is_refused_with_the_cheapest_fix_that_fits(prepared_data_dir):
    refused = plan(prepared_data_dir, DRY_RUN="1", N_GPUS_PER_NODE="1")
    assert not refused.preflight.ok
    (line,) = [x for x in refused.err.splitlines() if "ERROR: memory:" in x]
    assert "~92 GB per GPU at its peak (training) does not fit 80 GB" in line and "the cheapest fix: offload: " in line
    fix = line.split("the cheapest fix: offload: ", 1)[1].split(" (micro-batches")[0].split()
    fixed = plan(prepared_data_dir, *fix, DRY_RUN="1", N_GPUS_PER_NODE="1")
    assert fixed.preflight.ok, fixed.err
    assert fixed.row("memory").startswith("~60 of 80 GB a GPU at its peak, training")


@pytest.mark.parametrize("profile, gpus, gb", [("1x24gb", 1, 24), ("1x24gb_lora", 1, 24), ("1x80gb", 1, 80),
                                               ("4x40gb", 4, 40), ("8xh100", 8, 80)])
def test_each_gpu_profile_fits_the_gpus_it_is_for(profile, gpus, gb):
    """The plan of each hardware profile (its dry run: test_launch_dry_run.py) on the GPUs its name says, with room
    for the estimate's error."""
    config = compose_config([f"profile={profile}"])
    report = Report()
    plan = check_memory(config, report, {"GPU_MEMORY_GB": str(gb), "PATH": "/nonexistent"})
    assert report.errors == report.warnings == [] and config.trainer.n_gpus_per_node == gpus
    assert plan.gpu == gb and plan.peak <= 0.85 * gb, plan.row()


def test_the_gpus_memory_comes_from_nvidia_smi_else_the_knob_else_80(tmp_path):
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 24564\necho 24564\n")  # --query-gpu=memory.total in MiB, one line a GPU
    smi.chmod(0o755)
    assert gpu_memory({"PATH": str(tmp_path), "GPU_MEMORY_GB": "80"}) == (24564 / 1024, "nvidia-smi")
    assert gpu_memory({"PATH": "/nonexistent", "GPU_MEMORY_GB": "40"}) == (40.0, "GPU_MEMORY_GB")
    assert gpu_memory({"PATH": "/nonexistent"})[0] == 80.0
    with pytest.raises(KnobError, match="GPU_MEMORY_GB must be a GPU's memory in GB"):
        Knobs(gpu_memory_gb="lots").check({})


def test_smaller_micro_batches_shrink_the_plan_where_the_logits_dominate():
    config = compose_config(["profile=8xh100"])
    size, _ = model_size(QWEN_3B)
    at16 = plan_memory(config, size, "", 80, "")
    at8 = plan_memory(compose_config(["profile=8xh100", *[f"{k}=8" for k in MICRO_KEYS]]), size, "", 80, "")
    assert at16.activations > 1.8 * at8.activations and at16.phases["rollout"] == at8.phases["rollout"]


# ---- a hub id ----------------------------------------------------------------------------------------------

def test_a_hub_id_typo_is_refused_offline_from_the_local_cache(prepared_data_dir, tmp_path):
    cache = write_hub_cache(tmp_path / "hub")
    proc = run_script("run_gsm8k_grpo.sh", prepared_data_dir, DRY_RUN="1", MODEL_PATH=TYPO, HF_HUB_OFFLINE="1",
                      HF_HUB_CACHE=str(cache))
    assert proc.returncode == 1 and "[preflight] ok" not in proc.stderr
    assert (f"[preflight] ERROR: actor_rollout_ref.model.path: {TYPO} is not in the local Hugging Face cache {cache} "
            f"(HF_HUB_OFFLINE=1: the cache was asked, not the hub), so the launch could not load it: did you mean "
            f"{QWEN_3B}?") in proc.stderr, proc.stderr


def test_a_hub_id_is_asked_of_the_hub_when_online(prepared_data_dir, tmp_path, monkeypatch):
    env = {"DRY_RUN": "1", "HF_HUB_OFFLINE": "0", "HF_HUB_CACHE": str(tmp_path / "empty")}
    with HubAPI() as hub:
        typo = run_script("run_gsm8k_grpo.sh", prepared_data_dir, MODEL_PATH=TYPO, HF_ENDPOINT=hub.url, **env)
        assert typo.returncode == 1 and "[preflight] ok" not in typo.stderr
        assert f"the hub ({hub.url}) spells {TYPO} as {QWEN_3B}; set MODEL_PATH={QWEN_3B}" in typo.stderr
        # the same check in this process (huggingface_hub read the suite's HF_HUB_OFFLINE when it was imported)
        import huggingface_hub.constants

        monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
        environ = {"HF_ENDPOINT": hub.url, "HF_HUB_OFFLINE": "0"}
        missing, right = Report(), Report()
        check_hub_model(compose_config(["actor_rollout_ref.model.path=Qwen/Qwen2.5-3B-Instrcut"]), missing, environ)
        check_hub_model(compose_config([]), right, environ)
    assert hub.asked == [TYPO, "Qwen/Qwen2.5-3B-Instrcut", QWEN_3B]
    assert missing.errors == [f"actor_rollout_ref.model.path: Qwen/Qwen2.5-3B-Instrcut is not a model on the hub "
                              f"({hub.url}; a private one needs HF_TOKEN): did you mean {QWEN_3B}?"]
    assert right.errors == [] and right.notes == [f"model: {QWEN_3B} is a model on the hub ({hub.url})"]


def test_a_hub_that_does_not_answer_sends_the_check_to_the_cache_and_says_so(prepared_data_dir, tmp_path):
    cache = tmp_path / "hub"
    write_cached_model(cache, QWEN_3B, {"hidden_size": 2048, "intermediate_size": 11008, "num_hidden_layers": 36,
                                        "num_attention_heads": 16, "num_key_value_heads": 2, "vocab_size": 151936})
    proc = run_script("run_gsm8k_grpo.sh", prepared_data_dir, DRY_RUN="1", HF_HUB_OFFLINE="0",
                      HF_HUB_CACHE=str(cache), HF_ENDPOINT="http://127.0.0.1:9")  # discard port: nothing answers
    assert proc.returncode == 0, proc.stderr
    assert f"[preflight] model: {QWEN_3B} is in the local Hugging Face cache {cache} (the hub (http://127.0.0.1:9) " \
           "did not answer" in proc.stderr


# ---- the schedule, the GPUs, the knobs ------------------------------------------------------------------------

def test_a_schedule_of_no_step_is_refused(tmp_path):
    from data_prep import gsm8k

    sample = tmp_path / "sample"  # the bundled 32-row sample, under 8xh100's 256 prompts a step
    assert gsm8k.main(["--input_dir", str(REPO_ROOT / "data_prep" / "gsm8k_sample"), "--local_save_dir",
                       str(sample)]) == 0
    proc = run_script("run_gsm8k_grpo.sh", sample, DRY_RUN="1")
    assert proc.returncode == 1 and "[preflight] ok" not in proc.stderr and "steps = 15 epochs" not in proc.stdout
    assert "[preflight] ERROR: 0 training steps: 32 training rows // 256 prompts a step = 0 steps an epoch" in \
        proc.stderr, proc.stderr


def test_a_gpu_count_the_batch_does_not_divide_is_refused_with_the_counts_that_do(prepared_data_dir):
    refused = plan(prepared_data_dir, DRY_RUN="1", N_GPUS_PER_NODE="3")
    assert not refused.preflight.ok and "AssertionError: real_train_batch_size" not in refused.err
    (line,) = [x for x in refused.err.splitlines() if x.startswith("[preflight] ERROR")]
    assert line == ("[preflight] ERROR: the step's 256 prompts x 16 samples = 4096 trajectories do not split evenly "
                    "over 3 GPUs: verl would stop with an AssertionError; use N_GPUS_PER_NODE=1, 2, 4, 8 or 16, or a "
                    "batch 3 GPUs divide (data.train_batch_size=255 actor_rollout_ref.actor.ppo_mini_batch_size=255)")


def test_trace_off_with_a_trace_budget_is_refused_before_any_ok(prepared_data_dir):
    with pytest.raises(KnobError, match="TRACE=off and TRACE_GB_PER_DAY=2 contradict each other"):
        plan(prepared_data_dir, DRY_RUN="1", TRACE="off", TRACE_GB_PER_DAY="2")
    proc = run_script("run_gsm8k_grpo.sh", prepared_data_dir, DRY_RUN="1", TRACE="off", TRACE_GB_PER_DAY="2")
    assert proc.returncode == 1 and "[preflight] ok" not in proc.stderr and "contradict" in proc.stderr
    # a profile that traces nothing and a budget: the preflight's error, and no ok before it
    profile_off = plan(prepared_data_dir, DRY_RUN="1", PROFILE="1gpu_smoke", TRACE_GB_PER_DAY="2")
    assert not profile_off.preflight.ok and "[preflight] ok" not in profile_off.err
    assert "ERROR: TRACE_GB_PER_DAY=2 but this run traces nothing" in profile_off.err


# ---- the experiment and its checkpoints -----------------------------------------------------------------

def test_the_experiment_is_named_after_the_tool_set_the_model_and_the_profile():
    assert Knobs().experiment_name == "gsm8k_calculator_Qwen2.5-3B-Instruct_8xh100"
    assert Knobs(tool_set="both", model_path="Qwen/Qwen2.5-1.5B-Instruct", profile="4gpu").experiment_name == \
        "gsm8k_both_Qwen2.5-1.5B-Instruct_4gpu"
    assert Knobs(profile="1x24gb").experiment_name == "gsm8k_calculator_Qwen2.5-0.5B-Instruct_1x24gb"
    assert Knobs(experiment_name="mine").experiment_name == "mine"


def test_a_resume_of_another_models_checkpoints_is_refused(prepared_data_dir, tmp_path):
    from recipes.export.provenance import CHECKPOINT_TRACKER, write_run_record
    from recipes.preflight.checks import check_resume

    out = str(tmp_path / "run")
    first = plan(prepared_data_dir, DRY_RUN="1", OUTPUT_DIR=out, EXPERIMENT_NAME="run")
    assert first.preflight.ok, first.err
    record = write_run_record(first.launch.config)  # what the launch writes when it trains
    (record.parent / CHECKPOINT_TRACKER).write_text("20")  # verl saved step 20 there
    other = plan(prepared_data_dir, DRY_RUN="1", OUTPUT_DIR=out, EXPERIMENT_NAME="run",
                 MODEL_PATH="Qwen/Qwen2.5-1.5B-Instruct")
    assert not other.preflight.ok and "[preflight] ok" not in other.err
    assert (f"ERROR: {out}/checkpoints holds checkpoints of another run (model {QWEN_3B} (this launch: "
            "Qwen/Qwen2.5-1.5B-Instruct)): resuming would load its weights into this one") in other.err

    def refusal(*overrides):
        report = Report()
        check_resume(compose_config([*first.launch.overrides, *overrides]), report)
        return report.errors

    assert refusal() == []  # the same run resumes
    (bonus,) = refusal("reward.custom_reward_function.reward_kwargs.tool_call_bonus=0.1")
    assert "(reward reward.py:compute_score" in bonus
    assert refusal("actor_rollout_ref.model.lora_rank=64")[0].count("LoRA rank 0 (this launch: 64)") == 1
    assert refusal("trainer.resume_mode=disable", "actor_rollout_ref.model.path=Qwen/Qwen2.5-1.5B-Instruct") == []


# ---- the evaluation -------------------------------------------------------------------------------------

def test_the_evaluation_takes_the_gpus_it_finds_and_warns_of_no_training_step(prepared_data_dir, tmp_path):
    smi = tmp_path / "bin" / "nvidia-smi"
    smi.parent.mkdir()
    smi.write_text("#!/bin/sh\n[ \"$1\" = -L ] && printf 'GPU 0: H100 (UUID: a)\\nGPU 1: H100 (UUID: b)\\n'\n")
    smi.chmod(0o755)
    env = clean_environ(PYTHON=sys.executable, DATA_DIR=str(prepared_data_dir), DRY_RUN="1",
                        PATH=f"{smi.parent}{os.pathsep}{os.environ['PATH']}")
    proc = subprocess.run(["bash", str(REPO_ROOT / "scripts" / "eval_gsm8k.sh")], env=env, capture_output=True,
                          text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr
    assert "#   hardware  1 node(s) x 2 GPU(s)" in proc.stdout
    assert "trajectories of a step" not in proc.stderr
