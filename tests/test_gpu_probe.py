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
            share.workers_per_gpu, share.micro_batch, share.response_length, share.run_steps) == (
        8, 32, 512, 32, 2, 16, 1024, GSM8K_TRAIN_ROWS // 256 * 15)
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


def test_the_report_reads_verls_phases_and_projects_them_with_the_assumptions_said(tmp_path):
    from harness.probe.projection import report, step_metrics
    from harness.probe.share import share_of

    share = share_of(_composed("8xh100", tmp_path=tmp_path), "8xh100")
    metrics_file = tmp_path / "metrics.jsonl"
    metrics_file.write_text(json.dumps({"step": 1, "data": SMOKE_STEP_2}) + "\n")
    metrics = step_metrics(metrics_file)
    assert metrics == SMOKE_STEP_2 and step_metrics(metrics_file, step=2) == {}
    peaks = {"SGLang": 36 * 1024, "training worker": 17 * 1024, "GPU": 70 * 1024}
    lines, result = report(share, metrics, peaks, "", parameters(SHAPES["qwen2.5-0.5b"])[0])
    assert lines[0] == ("step 1: 12.1 s = generation 1.6 + old log-probs 1.9 + reference 1.9 + update 6.3 + weight "
                        "sync 0.3 + the rest 0.0 (verl's timing_s/*)")
    assert "512 trajectories, 262144 response tokens" in lines[1] and "161717 tokens/s generated" in lines[1]
    assert "by nvidia-smi: GPU 70.0 GiB, SGLang 36.0 GiB, training worker 17.0 GiB" in lines[2]
    state = 16 * 494_032_768 / 2**30
    assert f"actor state: {state:.1f} GiB on this GPU" in lines[3] and f"{state / 8:.1f} GiB a GPU on 8" in lines[3]
    assert lines[4].startswith("projection to 8xh100 (8 GPUs): a step ~12.1 s, the run (435 steps) ~1.5 h of steps")
    assert any("upper bound" in line for line in lines) and any("FSDP's all-gathers" in line for line in lines)
    fields = dict(item.split("=") for item in result.removeprefix("PROBE ").split())
    assert fields["step_s"] == "12.1" and fields["projected_run_h"] == f"{435 * 12.12 / 3600:.2f}"
    assert fields["projected_actor_peak_gib"] == f"{10.68 - state * 7 / 8:.1f}" and fields["sglang_peak_gib"] == "36.0"
    _, missing = report(share, {}, {}, "no nvidia-smi on PATH (no GPU)", 10)
    assert "step_s=nan" in missing and "projected_run_h=nan" in missing


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
    ({"MODEL_SHAPE": "qwen9"}, "MODEL_SHAPE must be one of qwen2.5-0.5b, qwen2.5-3b, tiny"),
    ({"MODEL_PATH": "/nowhere"}, "MODEL_PATH=/nowhere is not a model folder (no config.json)"),
    ({"PROFILE": "8xh100", "SHARE_PROMPTS": "", "MODEL_SHAPE": "", "TOKENIZER_PATH": "{work}/tok"},
     "TOKENIZER_PATH={work}/tok is inside WORK_DIR={work}"),
])
def test_the_probe_refuses_a_knob_it_cannot_use_in_one_line_and_changes_nothing(tmp_path, knobs, said):
    proc, last, work = run_refused("probe_gpu_step.sh", tmp_path, knobs)
    assert proc.returncode == 1 and last.startswith(f"[probe] error: {said.format(work=work)}"), proc.stderr
    assert [p.name for p in work.iterdir()] == [EARLIER_RUN]
