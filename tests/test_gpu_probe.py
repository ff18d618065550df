"""The production step's probe (scripts/probe_gpu_step.sh, scripts/harness/probe/) in pieces: the model shapes against
their published counts and the kernel census, random weights that transformers loads as the shape, one GPU's share of
a profile composed with verl's own validators, the report and its projection from verl's metrics, the GPU memory
sampler over real processes (nvidia-smi a stand-in: no GPU here), and the knobs refused in one line. The script end to
end, DRY_RUN and DEVICE=cpu: tests/test_gpu_probe_e2e.py."""

import json
import os
import subprocess
from dataclasses import replace

import pytest

from harness.probe.shapes import OF_MODEL, SHAPES, parameters
from testkit.knob_refusal import EARLIER_RUN, run_refused

pytestmark = pytest.mark.integration


def test_the_shapes_have_the_published_parameter_counts_and_the_census_attention():
    from recipes.gpu_env.kernel_census import QWEN25

    assert parameters(SHAPES["qwen2.5-3b"]) == (3_085_938_688, 2_774_773_760)  # "3.09B, 2.77B non-embedding"
    assert parameters(SHAPES["qwen2.5-0.5b"]) == (494_032_768, 357_898_112)  # "0.49B, 0.36B non-embedding"
    census = {shape.name: shape for shape in QWEN25}
    for name, key in (("Qwen2.5-3B", "qwen2.5-3b"), ("Qwen2.5-0.5B", "qwen2.5-0.5b")):
        config = SHAPES[key]
        heads, kv = config["num_attention_heads"], config["num_key_value_heads"]
        assert (census[name].heads, census[name].kv_heads, census[name].head_dim) == (
            heads, kv, config["hidden_size"] // heads)
    assert OF_MODEL["Qwen/Qwen2.5-3B-Instruct"] == "qwen2.5-3b"
    assert all(c["tie_word_embeddings"] and c["vocab_size"] == 151936 for c in SHAPES.values())


def test_random_weights_load_as_the_shape_with_its_tokenizer(tmp_path):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from harness.probe.random_model import write
    from harness.qwen_tokenizer import build_qwen25_tokenizer_dir

    tokenizer = build_qwen25_tokenizer_dir(tmp_path / "tok")
    made = write(SHAPES["tiny"], tokenizer, tmp_path / "model", seed=3)
    assert made["parameters"] == parameters(SHAPES["tiny"])[0] and made["device"] == "cpu"
    model = AutoModelForCausalLM.from_pretrained(str(tmp_path / "model"))
    assert sum(p.numel() for p in model.parameters()) == made["parameters"]
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()  # tied
    assert torch.equal(model.model.norm.weight, torch.ones(128))
    assert 0.015 < float(model.model.layers[0].mlp.up_proj.weight.detach().std()) < 0.025
    config = json.loads((tmp_path / "model" / "config.json").read_text())
    assert config["transformers_version"] and config["hidden_size"] == 128
    assert AutoTokenizer.from_pretrained(str(tmp_path / "model")).convert_tokens_to_ids("<tool_call>") == 151657
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # written whole, renamed in


def _composed(profile, *overrides, tmp_path):
    from recipes.launch.knobs import Knobs, compose_launch_config

    return compose_launch_config(Knobs(profile=profile, model_path=str(tmp_path), data_dir=str(tmp_path)), overrides)


def test_one_gpus_share_of_the_8xh100_step_is_a_config_verl_validates(tmp_path):
    """256 prompts x 16 over 8 GPUs: 32 prompts and 512 trajectories a GPU, the mini-batch per GPU kept (verl divides
    it by the ranks), 2 of 16 agent-loop workers, 435 steps on GSM8K; the overrides make exactly that on one GPU, with
    SGLang's ignore_eos as a server default."""
    from omegaconf import OmegaConf
    from verl.utils.config import omega_conf_to_dataclass
    from verl.workers.config import RolloutConfig

    from harness.probe.share import GSM8K_TRAIN_ROWS, share_of
    from recipes.preflight.compose import validate_like_verl

    share = share_of(_composed("8xh100", tmp_path=tmp_path), "8xh100")
    assert (share.gpus, share.prompts_per_gpu, share.trajectories_per_gpu, share.mini_batch_per_gpu,
            share.workers_per_gpu, share.micro_batch, share.log_prob_micro_batch, share.response_length,
            share.run_steps) == (8, 32, 512, 32, 2, 16, 16, 1024, GSM8K_TRAIN_ROWS // 256 * 15)
    one = _composed("8xh100", "trainer.n_gpus_per_node=1", *share.overrides(), tmp_path=tmp_path)
    validate_like_verl(one)
    # verl's own normalisation: the same trajectories per GPU per update as on the node
    node = _composed("8xh100", tmp_path=tmp_path)
    per_gpu = {c.actor_rollout_ref.actor.ppo_mini_batch_size * c.actor_rollout_ref.rollout.n
               // c.trainer.n_gpus_per_node for c in (node, one)}
    assert per_gpu == {512}
    assert (one.data.train_batch_size, one.trainer.total_training_steps, one.trainer.val_before_train) == (32, 1, False)
    resolved = OmegaConf.create(OmegaConf.to_container(one, resolve=True))
    rollout = omega_conf_to_dataclass(resolved.actor_rollout_ref.rollout)
    assert isinstance(rollout, RolloutConfig)
    assert json.loads(rollout.engine_kwargs["sglang"]["preferred_sampling_params"]) == {"ignore_eos": True}
    assert (rollout.max_num_seqs, rollout.gpu_memory_utilization, rollout.tensor_model_parallel_size) == (512, 0.5, 1)
    four = share_of(_composed("4gpu", tmp_path=tmp_path), "4gpu")
    assert (four.gpus, four.prompts_per_gpu, four.trajectories_per_gpu) == (4, 32, 512)


def test_a_share_that_does_not_divide_over_the_gpus_is_refused(tmp_path):
    from harness.probe.share import ShareError, share_of

    with pytest.raises(ShareError, match="data.train_batch_size 100 does not divide over its 8 GPUs"):
        share_of(_composed("8xh100", "data.train_batch_size=100", "actor_rollout_ref.actor.ppo_mini_batch_size=100",
                           tmp_path=tmp_path), "8xh100")


SMOKE_STEP_2 = {  # verl's metrics of the 1-GPU smoke's step 2 (Qwen2.5-0.5B's shape on an H100), and its memory
    "timing_s/step": 12.12, "timing_s/gen": 1.621, "timing_s/old_log_prob": 1.916, "timing_s/ref": 1.936,
    "timing_s/update_actor": 6.303, "timing_s/update_weights": 0.3167, "response_length/mean": 512.0,
    "response_length/clip_ratio": 1.0, "perf/throughput": 2326.0, "actor/perf/max_memory_allocated_gb": 10.68,
    "actor/perf/max_memory_reserved_gb": 12.0}


def _planned(tmp_path, share, shape: str, gpu_gib: float = 79.6):
    """The memory plan's figures for the probe's one-GPU run of `share` and for a GPU of 8xh100, as the probe makes
    them (harness/probe/memory_fit.py), for the model of `shape`."""
    from harness.probe import memory_fit
    from recipes.models import ModelSize

    size = ModelSize.from_config("probe", SHAPES[shape])
    offload = ("actor_rollout_ref.actor.fsdp_config.param_offload=True",
               "actor_rollout_ref.actor.fsdp_config.optimizer_offload=True")
    one = _composed("8xh100", "trainer.n_gpus_per_node=1", *share.overrides(), *offload, tmp_path=tmp_path)
    node = _composed("8xh100", tmp_path=tmp_path)
    return memory_fit.Planned(gpu_gib, "nvidia-smi", 16, memory_fit.actor_peak(one, size, gpu_gib),
                              memory_fit.actor_peak(node, size, gpu_gib)), one, size


def test_the_report_projects_each_phase_with_what_it_scales_and_what_is_an_upper_bound(tmp_path):
    from harness.probe.projection import report, step_metrics
    from harness.probe.share import share_of

    share = share_of(_composed("8xh100", tmp_path=tmp_path), "8xh100").sized_down(32, 16, 1024, 4, "sglang",
                                                                                  log_prob_micro_batch=16)
    metrics_file = tmp_path / "metrics.jsonl"
    metrics_file.write_text(json.dumps({"step": 1, "data": SMOKE_STEP_2}) + "\n")
    metrics = step_metrics(metrics_file)
    assert metrics == SMOKE_STEP_2 and step_metrics(metrics_file, step=2) == {}
    peaks = {"SGLang": 36 * 1024, "training worker": 17 * 1024, "GPU": 70 * 1024}
    count = parameters(SHAPES["qwen2.5-0.5b"])[0]
    planned, _, _ = _planned(tmp_path, share, "qwen2.5-0.5b")
    lines, result = report(share, metrics, peaks, "", count, planned)
    text = "\n".join(lines)
    assert lines[0] == ("step 1: 12.1 s = generation 1.6 + old log-probs 1.9 + reference 1.9 + update 6.3 + weight "
                        "sync 0.3 + the rest 0.0 (verl's timing_s/*)")
    assert "512 trajectories, 262144 response tokens" in lines[1] and "161717 tokens/s generated" in lines[1]
    assert "by nvidia-smi: GPU 70.0 GiB, SGLang 36.0 GiB, training worker 17.0 GiB" in lines[2]
    # each phase: what it scales, and what only one GPU does in it
    phase = {name: next(line for line in lines if line.startswith(f"  {name} "))
             for name in ("generation", "old log-probs", "reference", "update", "weight sync")}
    assert "1:1: a node GPU's engine generates the same 512 trajectories" in phase["generation"]
    assert "1:1 at micro-batch 16 (the profile's); an upper bound" in phase["old log-probs"]
    ref_gib = 32 * count * 2 / 2**30  # 512 trajectories in micro-batches of 16, the whole model in bf16 each
    assert f"each of 32 micro-batches ({ref_gib:,.1f} GiB), a node GPU 1/8 of it ({ref_gib / 8:,.1f} GiB)" in \
        phase["reference"]
    assert phase["update"].lstrip().startswith("update           6.3 s  an upper bound: micro-batch 4 (the profile's")
    assert f"({count * 12 / 2**30:,.1f} GiB each way, offload)" in phase["update"]
    assert "~1.5 h of steps: an upper bound" in text and "not in the hours" in text
    # the node's actor peak is the plan's for a node GPU, not this GPU's peak less 7/8 of the state
    fields = dict(item.split("=") for item in result.removeprefix("PROBE ").split())
    state = 16 * count / 2**30
    assert fields["projected_actor_peak_gib"] == f"{planned.node.gib:.1f}" != f"{10.68 - state * 7 / 8:.1f}"
    assert fields["planned_actor_peak_gib"] == f"{planned.this_run.gib:.1f}"
    assert (fields["update_micro_batch"], fields["log_prob_micro_batch"]) == ("4", "16")
    ratio = 10.68 / planned.this_run.gib
    assert f"measured 10.7 GiB: {ratio:.2f}x the plan" in text and f"this run measured {ratio:.2f}x the plan's" in text
    assert f"the actor's peak ~{planned.node.gib:.1f} GiB a GPU ({planned.node.phase}, micro-batch 16, 1/8" in text
    assert fields["step_s"] == "12.1" and fields["projected_run_h"] == f"{435 * 12.12 / 3600:.2f}"
    assert fields["sglang_peak_gib"] == "36.0"
    said, missing = report(share, {}, {}, "no nvidia-smi on PATH (no GPU)", 10, planned)
    assert "step_s=nan" in missing and "projected_run_h=nan" in missing
    assert "no GPU memory measured here to check it against" in said[3] and "x the plan" not in "\n".join(said)


def test_the_node_gpus_actor_peak_is_the_memory_plans_and_the_log_prob_passes_take_the_largest_micro_batch_that_fits(
        tmp_path):
    """8xh100 with Qwen2.5-3B: a node GPU holds 1/8 of the state and the activations of micro-batches of 16, ~49 GiB
    by the plan (the old projection, the one-GPU update's peak less 7/8 of the 46 GiB of state, said a few); one H100
    runs the log-prob passes at the profile's 16 (forward only) where the update needs 4; a smaller GPU fits fewer."""
    from harness.probe import memory_fit
    from harness.probe.share import share_of
    from recipes.config_view import ConfigView
    from recipes.preflight import memory

    share = share_of(_composed("8xh100", tmp_path=tmp_path), "8xh100").sized_down(32, 16, 1024, 4, "sglang",
                                                                                  log_prob_micro_batch=16)
    planned, one, size = _planned(tmp_path, share, "qwen2.5-3b")
    node_plan = memory.plan_memory(ConfigView.of(_composed("8xh100", tmp_path=tmp_path)), size, "", 79.6, "")
    assert planned.node.phase == "training" and planned.node.gib == pytest.approx(
        node_plan.phases["training"] - memory.CONTEXT_GIB - memory.SGLANG_OVERHEAD_GIB)
    assert 40 < planned.node.gib < 60 and planned.node.plan.params == pytest.approx(46.0 / 8 / 4, rel=0.01)
    assert [memory_fit.log_prob_micro_batch(one, size, gpu, 4, 16) for gpu in (79.6, 40, 24)] == [16, 8, 4]
    with_16 = memory.plan_memory(ConfigView.of(memory_fit.with_micro_batches(one, 4, 16)), size, "", 79.6, "")
    assert with_16.phases["old log-probs"] <= memory.FIX_MARGIN * 79.6 < with_16.phases["training"] + 20


def test_the_memory_plan_warns_where_one_gpu_holds_the_whole_state_and_the_logits(tmp_path):
    from harness.probe.projection import memory_plan
    from harness.probe.share import share_of

    # micro-batches of 32, twice the profile's: where the logits of one take the GPU near its memory
    share = replace(share_of(_composed("8xh100", tmp_path=tmp_path), "8xh100"), micro_batch=32)
    count = parameters(SHAPES["qwen2.5-3b"])[0]
    plan, warning = memory_plan(share, count, 151936, 79.6)  # an H100 80 GB as nvidia-smi counts it
    assert "actor state 46.0 GiB on one GPU" in plan and "up to 18.5 GiB" in plan and "0.5 x 79.6 GiB = 39.8" in plan
    assert warning.startswith("WARNING: state and two copies of the logits (83.1 GiB) near this GPU's 79.6 GiB")
    assert len(memory_plan(share.sized_down(32, 16, 1024, 8, "sglang"), count, 151936, 79.6)) == 1
    assert len(memory_plan(share, count, 151936, None)) == 1  # no GPU to compare with


def test_the_memory_sampler_attributes_each_process_by_its_title(tmp_path):
    """Real processes titled as SGLang's scheduler and verl's worker title themselves; nvidia-smi is a stand-in that
    reports them (no GPU here)."""
    from harness.probe import gpu_memory

    titled = {title: subprocess.Popen(["bash", "-c", f'exec -a "{title}" sleep 60'])
              for title in ("sglang::scheduler_TP0", "ray::WorkerDict.actor_rollout_compute_log_prob")}
    try:
        smi = tmp_path / "nvidia-smi"
        sglang, worker = (p.pid for p in titled.values())
        smi.write_text("#!/bin/bash\n# stand-in for NVIDIA's nvidia-smi\ncase \"$1\" in\n"
                       f'  --query-compute-apps=*) echo "{sglang}, 36000"; echo "{worker}, 12000"; '
                       f'echo "{os.getpid()}, 500";;\n'
                       '  --query-gpu=memory.used) echo "50000";;\nesac\n')
        smi.chmod(0o755)
        import time

        time.sleep(0.3)  # the titles are set by exec
        sampler = gpu_memory.Sampler(str(smi))
        sampler.sample()
        assert sampler.peaks == {"SGLang": 36000, "training worker": 12000, "other": 500, "GPU": 50000}
    finally:
        for proc in titled.values():
            proc.kill()
            proc.wait()
    assert gpu_memory.Sampler(smi=None).unavailable if not __import__("shutil").which("nvidia-smi") else True


@pytest.mark.parametrize("knobs, said", [
    ({"DEVICE": "tpu"}, "DEVICE must be gpu or cpu, not 'tpu'"),
    ({"DRY_RUN": "yes"}, "DRY_RUN must be 0 or 1, not 'yes'"),
    ({"SHARE_PROMPTS": "0"}, "SHARE_PROMPTS must be a whole number, at least 1"),
    ({"LOG_PROB_MICRO_BATCH": "x"}, "LOG_PROB_MICRO_BATCH must be a whole number, at least 1"),
    ({"MODEL_SHAPE": "qwen9"}, "MODEL_SHAPE must be one of qwen2.5-0.5b, qwen2.5-3b, tiny"),
    ({"MODEL_PATH": "/nowhere"}, "MODEL_PATH=/nowhere is not a model folder (no config.json)"),
    ({"PROFILE": "8xh100", "SHARE_PROMPTS": "", "MODEL_SHAPE": "", "TOKENIZER_PATH": "{work}/tok"},
     "TOKENIZER_PATH={work}/tok is inside WORK_DIR={work}"),
])
def test_the_probe_refuses_a_knob_it_cannot_use_in_one_line_and_changes_nothing(tmp_path, knobs, said):
    proc, last, work = run_refused("probe_gpu_step.sh", tmp_path, knobs)
    assert proc.returncode == 1 and last.startswith(f"[probe] error: {said.format(work=work)}"), proc.stderr
    assert [p.name for p in work.iterdir()] == [EARLIER_RUN]


@pytest.mark.parametrize("profile, home", [("4gpu", "profile/4gpu.yaml"), ("1x24gb", "profile/1x24gb.yaml"),
                                           ("8xh100", "gsm8k_multiturn_grpo.yaml")])
def test_the_probes_measured_step_replaces_the_estimate_where_the_plan_reads_it(tmp_path, profile, home):
    """A copy of config/: the measured step lands in the profile's own recipe.step_time (8xh100's is the recipe's),
    every other line as it was; the composed config, and so the plan's time row, read the measurement."""
    import shutil

    from harness.probe.step_time import record_step_time
    from recipes.config_view import ConfigView
    from recipes.constants import CONFIG_DIR
    from recipes.preflight.compose import compose_config

    config_dir = tmp_path / "config"
    shutil.copytree(CONFIG_DIR, config_dir)
    before = (config_dir / home).read_text().splitlines()
    source = 'measured on one H100 by scripts/probe_gpu_step.sh, a "quoted" note'
    assert record_step_time(profile, 87.24, "Qwen2.5-3B", source, config_dir) == config_dir / home
    after = (config_dir / home).read_text().splitlines()
    line = ('  step_time: {seconds: [87.2, 87.2], model: Qwen2.5-3B, source: "measured on one H100 by '
            'scripts/probe_gpu_step.sh, a \\"quoted\\" note"}')
    new = [x for x in after if x not in before]
    assert new == [line] if any("step_time" in x for x in before) else new == ["recipe:", line]  # 4gpu had none
    assert [x for x in before if x not in after] == [x for x in before if x.startswith("  step_time:")]
    view = ConfigView.of(compose_config([f"profile={profile}"], config_dir=config_dir))
    assert (view.step_seconds, view.step_model, view.step_source) == ((87.2, 87.2), "Qwen2.5-3B", source)
    others = ConfigView.of(compose_config(["profile=lora"], config_dir=config_dir))
    assert others.step_seconds == (87.2, 87.2) if profile == "8xh100" else (60.0, 90.0)  # the recipe's, inherited
