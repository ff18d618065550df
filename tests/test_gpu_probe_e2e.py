"""scripts/probe_gpu_step.sh end to end here: DRY_RUN=1 as a user runs it before a GPU (the 8xh100 share, GSM8K rows,
the Qwen2.5 tokenizer, Qwen2.5-3B's config without weights, the memory plan, the command, the launcher's preflight
and composed config; nothing starts). DEVICE=cpu, every stage on the CPU stand-ins (one launch): tests/
test_gpu_checks_on_cpu.py, a benchmark's own check (`-m bench`). Its pieces: tests/test_gpu_probe.py."""

import json
import os
import re
import subprocess
import sys

import pytest

from recipes.constants import REPO_ROOT

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]
_NOT_PASSED_ON = ("RAY_", "VERL_", "WORK_DIR", "OUTPUT_DIR", "PROFILE", "DATA_DIR", "MODEL_", "EXPERIMENT_NAME",
                  "DRY_RUN", "DEVICE", "LOGGER", "TRACE", "TOKENIZER_PATH", "GSM8K_DIR", "SHARE_PROMPTS", "ROLLOUT_N",
                  "RESPONSE_LENGTH", "MICRO_BATCH", "LOG_PROB_MICRO_BATCH", "N_GPUS_PER_NODE", "NNODES")
PROBE = re.compile(r"^PROBE step_s=(?P<step>\S+) gen_s=(?P<gen>\S+) old_log_prob_s=(?P<old>\S+) ref_s=(?P<ref>\S+) "
                   r"update_s=(?P<update>\S+) weight_sync_s=(\S+) gen_tokens_per_s=(\S+) actor_peak_gib=(?P<actor>\S+) "
                   r"sglang_peak_gib=(?P<sglang>\S+) gpu_peak_gib=(\S+) update_micro_batch=(?P<mb>\d+) "
                   r"log_prob_micro_batch=(?P<lp>\d+) planned_actor_peak_gib=(?P<planned>\S+) projected_step_s=(\S+) "
                   r"projected_run_h=(?P<run_h>\S+) projected_actor_peak_gib=(?P<node>\S+) wall_s=(\d+)$")


def probe(work, *args, **env):
    base = {k: v for k, v in os.environ.items() if not k.startswith(_NOT_PASSED_ON)}
    return subprocess.run(["bash", str(REPO_ROOT / "scripts" / "probe_gpu_step.sh"), *args], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=840, stdin=subprocess.DEVNULL,
                          env={**base, "PYTHON": sys.executable, "WORK_DIR": str(work), **env})


def stages(text: str) -> list[str]:
    return [m.group(1) for m in re.finditer(r"^\[probe\] stage: (.*?) \(\d+ s\)$", text, re.M)]


def test_the_dry_run_composes_the_8xh100_share_on_one_gpu_and_starts_nothing(tmp_path):
    work = tmp_path / "work"
    proc = probe(work, DRY_RUN="1")
    out = proc.stdout
    assert proc.returncode == 0, out[-4000:]
    assert stages(out) == ["the share of 8xh100 one GPU runs", "GSM8K rows for one step", "tokenizer and model",
                           "launcher DRY_RUN: preflight, the composed config and the plan"]
    assert ("share      8xh100: 256 prompts x 16 over 8 GPU(s) -> one GPU runs 32 prompts, 512 trajectories; "
            "mini-batch 32 prompts, micro-batch 4 (the log-prob passes' 16); 2 of 16 agent-loop workers") in out
    # the log-prob passes at the profile's micro-batch: the memory plan fits them on an 80 GB GPU (the update: 4)
    assert re.search(r"^\[probe\] plan       micro-batches: the update 4 \(MICRO_BATCH\), the reference and old "
                     r"log-probs 16 \(the profile's 16; .*\); the actor's peak ~\d+\.\d GiB here \(\S+.*\), ~\d+\.\d "
                     r"GiB a GPU on the node \(training\), by the memory plan on a 80\.0 GiB GPU \(no GPU here", out,
                     re.M)
    assert "run        435 steps of the profile on GSM8K's 7,473 train rows" in out
    assert ("actor state 46.0 GiB on one GPU (16 B x 3,085,938,688 parameters; 5.7 GiB a GPU on 8); the logits of a "
            "micro-batch of 4 up to 2.3 GiB") in out
    assert re.search(r"^\[preflight\] model: head_dim 128, 16 heads / 2 KV heads, vocab 151936 >= \d+ tokens, context "
                     r"32768: SGLang and FlashInfer serve it, tool tags one token each$", out, re.M), out[-3000:]
    assert "DRY_RUN=1: preflight passed, nothing started; the launch would run (profile 8xh100)" in out
    assert re.search(r"hardware +1 node\(s\) x 1 GPU\(s\); rollout sglang, TP 1: 1 engine\(s\) of up to 512", out)
    assert "batch     32 prompts x 16 samples = 512 trajectories per step; prompt/response 1024/1024 tokens" in out
    config = (work / "outputs" / "launch_config.yaml").read_text()
    assert "preferred_sampling_params: '{\"ignore_eos\": true}'" in config
    assert "val_before_train: false" in config and "total_training_steps: 1" in config
    assert "param_offload: true" in config and "optimizer_offload: true" in config  # the whole actor on one GPU
    assert "ppo_micro_batch_size_per_gpu: 4" in config and config.count("log_prob_micro_batch_size_per_gpu: 16") == 2
    assert not (work / "model" / "model.safetensors").exists()  # no weights written
    assert json.loads((work / "model" / "config.json").read_text())["num_hidden_layers"] == 36
    assert "PROBE " not in out and not (work / "outputs" / "metrics.jsonl").exists()
