"""Does the launch fit the GPUs, the model and the data it names? The dry run's memory plan (recipes/preflight/
memory.py) against the one GPU measurement and the profiles' GPUs, and the mistakes a dry run refuses in one line
before anything starts: a hub id with a typo (the hub asked when it may be, the local cache when not), a schedule
of no step, a GPU count the batch does not divide, contradictory trace knobs, a resume of another run's
checkpoints."""

import os
import re
import subprocess
import sys

import pytest

import record_measured as measured
from recipes.config_view import ConfigView
from recipes.constants import REPO_ROOT
from recipes.launch.knobs import KnobError, Knobs
from recipes.models import model_size, resolve_model
from recipes.preflight.compose import compose_config
from recipes.preflight.findings import Report
from recipes.preflight.hub_model import check_hub_model
from recipes.preflight.memory import (
    GIB,
    MICRO_KEYS,
    check_memory,
    gpu_memory,
    plan_for,
    plan_memory,
    train_activation_bytes,
)
from testkit.hf_cache import HubAPI, write_cached_model, write_hub_cache
from testkit.launcher import Planned, clean_environ, plan, run_script

pytestmark = pytest.mark.integration

QWEN_3B, TYPO = "Qwen/Qwen2.5-3B-Instruct", "Qwen/Qwen2.5-3b-instruct"


def figure(name: str) -> float:
    return float(next(f.value for f in measured.read_page(measured.PAGE) if f.name == name))


def test_the_plan_matches_the_one_gpu_measurement():
    """The 1-GPU smoke (0.5B shape, micro-batches of 4 trajectories of ~880 tokens: ~3.5k packed tokens) peaked at
    verl's actor/perf/max_memory_allocated_gb; the plan's actor at that shape (shards, gathered blocks, activations)
    is within 10% of it."""
    config = ConfigView.of(compose_config(["profile=1gpu_smoke"]))
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
    assert "released while the actor computes; 80 GB: the card the profile is for (recipe.gpu_memory_gb), no " \
           "nvidia-smi here" in row
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
    view = ConfigView.of(compose_config([f"profile={profile}"]))
    report = Report()
    plan, _ = plan_for(view, resolve_model(view.model_path), gb, {"PATH": "/nonexistent"})
    check_memory(view, plan, report)
    assert report.errors == report.warnings == [] and view.gpus_per_node == gpus
    assert plan.gpu == gb and plan.peak <= 0.85 * gb, plan.row()


def test_the_gpus_memory_comes_from_nvidia_smi_else_the_knob_else_the_profiles_card(tmp_path):
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 24564\necho 24564\n")  # --query-gpu=memory.total in MiB, one line a GPU
    smi.chmod(0o755)
    assert gpu_memory(80, 40, {"PATH": str(tmp_path)}) == (24564 / 1024, "nvidia-smi")
    assert gpu_memory(40, 24, {"PATH": "/nonexistent", "GPU_MEMORY_GB": "80"}) == (40.0, "GPU_MEMORY_GB")
    # no knob: the card the profile is for (the environment's GPU_MEMORY_GB is the launcher's to read, not this)
    assert gpu_memory(None, 24, {"PATH": "/nonexistent", "GPU_MEMORY_GB": "80"})[0] == 24.0
    assert gpu_memory(None, None, {"PATH": "/nonexistent"})[0] is None
    with pytest.raises(KnobError, match="GPU_MEMORY_GB must be a GPU's memory in GB"):
        Knobs(gpu_memory_gb="lots").check({})


def test_smaller_micro_batches_shrink_the_plan_where_the_logits_dominate():
    config = ConfigView.of(compose_config(["profile=8xh100"]))
    size, _ = model_size(QWEN_3B)
    at16 = plan_memory(config, size, "", 80, "")
    at8 = plan_memory(ConfigView.of(compose_config(["profile=8xh100", *[f"{k}=8" for k in MICRO_KEYS]])), size, "",
                      80, "")
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
        check_hub_model(resolve_model("Qwen/Qwen2.5-3B-Instrcut"), missing, environ)
        check_hub_model(resolve_model(QWEN_3B), right, environ)
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
    assert proc.returncode == 1 and "[preflight] ok" not in proc.stderr
    assert "#   schedule  0 steps = 15 epochs x 0 (32 rows // 256)" in proc.stdout  # the plan, and its problem
    assert "[preflight] ERROR: 0 training steps: 32 training rows // 256 prompts a step = 0 steps an epoch" in \
        proc.stderr, proc.stderr


def test_a_gpu_count_the_batch_does_not_divide_is_refused_with_the_counts_that_do(prepared_data_dir):
    refused = plan(prepared_data_dir, DRY_RUN="1", N_GPUS_PER_NODE="3")
    assert not refused.preflight.ok and "AssertionError: real_train_batch_size" not in refused.err
    (line,) = [x for x in refused.err.splitlines() if x.startswith("[preflight] ERROR")]
    # the counts and the batch that pass every rule, as given: 1, 2 or 4 GPUs would not hold 3B's step or all of
    # its trajectories at once; 255 prompts (before) split GRPO groups over the 16 agent-loop workers and overfilled
    # the 3 engines; 96 is whole for both
    assert line == ("[preflight] ERROR: the step's 256 prompts x 16 samples = 4096 trajectories do not split evenly "
                    "over 3 GPUs: verl would stop with an AssertionError; use N_GPUS_PER_NODE=8 or 16, or a "
                    "batch 3 GPUs divide (data.train_batch_size=96 actor_rollout_ref.actor.ppo_mini_batch_size=96)")
    passes(prepared_data_dir, "data.train_batch_size=96", "actor_rollout_ref.actor.ppo_mini_batch_size=96",
           N_GPUS_PER_NODE="3")


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


def test_every_check_finds_a_hub_model_in_the_cache_hf_hub_cache_names(tmp_path, monkeypatch):
    """HF_HUB_CACHE set after huggingface_hub read its own (as the suite's in-process dry runs set it, verl and
    transformers imported): the hub check, the memory plan and the checkpoint sizing all read the model from that
    one cache. Before, the checkpoint sizing asked huggingface_hub's default and found nothing."""
    import json
    import struct

    import huggingface_hub.constants  # noqa: F401 -- its HF_HUB_CACHE read now, before the one set below

    from recipes.preflight.facts import facts_of
    from recipes.preflight.storage import check_checkpoint_space, model_parameter_count

    cache = tmp_path / "elsewhere"
    snapshot = write_cached_model(cache, "Qwen/Qwen2.5-0.5B-Instruct",
                                  {"hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24,
                                   "num_attention_heads": 14, "num_key_value_heads": 2, "vocab_size": 151936,
                                   "tie_word_embeddings": True})
    header = json.dumps({"embed": {"dtype": "BF16", "shape": [151936, 896], "data_offsets": [0, 0]}}).encode()
    (snapshot / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header)
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")

    facts = facts_of(compose_config(["profile=1x24gb", f"trainer.default_local_dir={tmp_path}/ckpt"]))
    assert facts.model.folder == snapshot
    hub, space = Report(), Report()
    check_hub_model(facts.model, hub)
    assert hub.errors == [] and hub.notes[0].startswith(f"model: Qwen/Qwen2.5-0.5B-Instruct is in the local Hugging "
                                                        f"Face cache {cache} (HF_HUB_OFFLINE=1")
    assert facts.memory.size_source == "config.json in the HF cache"
    assert model_parameter_count(facts.model) == 151936 * 896
    check_checkpoint_space(facts.view, 435, facts.model, space)
    assert not [w for w in space.warnings if "cannot size the checkpoints" in w]


# ---- every fix a refusal suggests passes as given ---------------------------------------------------------------

SUGGESTED = re.compile(r"\b([A-Z][A-Z0-9_]*|[a-z_]+(?:\.[a-z_]+)+)=([^\s,;:()]+)")


def suggested(text: str) -> tuple[dict[str, str], list[str]]:
    """(knobs, hydra overrides) a suggestion names, as a user would type them."""
    knobs, overrides = {}, []
    for key, value in SUGGESTED.findall(text):
        if key.isupper():
            knobs[key] = value
        else:
            overrides.append(f"{key}={value}")
    return knobs, overrides


def passes(data_dir, *overrides, before: Planned | None = None, **env) -> None:
    """The launch with a suggestion applied: no problem, and no warning the refused launch did not have already (the
    disk's free space is this machine's)."""
    fixed = plan(data_dir, *overrides, DRY_RUN="1", **env)
    assert fixed.preflight.ok, fixed.err
    def kind(warning: str) -> str:
        return warning.split(";")[0].split(" (")[0]

    had = {kind(w) for w in (before.preflight.report.warnings if before and before.preflight.report else [])}
    assert [w for w in fixed.preflight.report.warnings if "GB free" not in w and kind(w) not in had] == [], fixed.err


TP2 = "actor_rollout_ref.rollout.tensor_model_parallel_size=2"
# a setting the preflight refuses (or warns of), and the words of its line that come before the fixes
REFUSALS = {"gpus that do not divide the step": ({"N_GPUS_PER_NODE": "3"}, (), "AssertionError; use "),
            "a model that does not fit one GPU": ({"N_GPUS_PER_NODE": "1"}, (), "the cheapest fix: "),
            "workers that split groups": ({}, ("actor_rollout_ref.rollout.agent.num_workers=12",), "groups; use "),
            "engines that cannot run a step at once": ({}, (TP2, "actor_rollout_ref.rollout.max_num_seqs=256"),
                                                       "; set ")}


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_a_refusals_suggested_fix_passes_as_given(prepared_data_dir, case):
    """Each alternative the line offers, applied as given (every GPU count it lists, each one alone), passes the
    whole preflight with no warning of its rules."""
    env, args, before = REFUSALS[case]
    refused = plan(prepared_data_dir, *args, DRY_RUN="1", **env)
    (line,) = [x for x in refused.err.splitlines() if before in x]
    for alternative in line.split(before, 1)[1].split(" if ")[0].split(", or "):
        knobs, overrides = suggested(alternative)
        if "N_GPUS_PER_NODE" in knobs:
            counts = re.findall(r"\d+", alternative.split("N_GPUS_PER_NODE=", 1)[1].split(" (")[0])
        else:
            counts = [env.get("N_GPUS_PER_NODE", "")]
        assert overrides or counts != [env.get("N_GPUS_PER_NODE", "")], line  # it suggests something
        for count in counts:
            passes(prepared_data_dir, *args, *overrides, before=refused, **{**env, "N_GPUS_PER_NODE": count})


def test_the_fewer_prompts_a_short_dataset_is_told_to_take_pass(tmp_path):
    from data_prep import gsm8k

    sample = tmp_path / "sample"  # the bundled 32-row sample, under 8xh100's 256 prompts a step
    assert gsm8k.main(["--input_dir", str(REPO_ROOT / "data_prep" / "gsm8k_sample"), "--local_save_dir",
                       str(sample)]) == 0
    refused = plan(sample, DRY_RUN="1")
    (line,) = [e for e in refused.preflight.report.errors if e.startswith("0 training steps")]
    _, overrides = suggested(line.split("take fewer prompts a step", 1)[1])
    assert overrides == ["data.train_batch_size=32", "actor_rollout_ref.actor.ppo_mini_batch_size=32"], line
    passes(sample, *overrides)


def test_the_gpus_a_node_shows_come_with_the_batch_they_divide(prepared_data_dir):
    from recipes.preflight.checks import check_gpus

    facts = plan(prepared_data_dir, DRY_RUN="1").launch.facts
    report = Report()
    check_gpus(facts.view, report, visible=3, breaks=facts.breaks)
    (line,) = report.errors
    knobs, overrides = suggested(line.split("; set ", 1)[1])
    assert knobs == {"N_GPUS_PER_NODE": "3"} and overrides, line
    passes(prepared_data_dir, *overrides, **knobs)
