"""What one timed step of a share shows, from verl's own metrics of it (its `file` logger: timing_s/*, response
lengths, perf/*, the actor's torch memory peak) and the GPU memory sampled beside it; and the projection onto the
profile's node and run, with the assumptions it rests on printed beside it.

    [probe] step 1: 87.2 s = generation 24.1 + old log-probs 10.2 + reference 10.9 + update 38.0 + weight sync 2.3
            + the rest 1.7
    PROBE step_s=<s> gen_s=<s> old_log_prob_s=<s> ref_s=<s> update_s=<s> weight_sync_s=<s> gen_tokens_per_s=<n>
          actor_peak_gib=<g> sglang_peak_gib=<g> gpu_peak_gib=<g> projected_step_s=<s> projected_run_h=<h>
          projected_actor_peak_gib=<g>

(one line each; `nan` where a figure is missing). The actor's state in verl's FSDP is fp32 weights, gradients and
Adam's two moments, 16 bytes a parameter: whole on one GPU, a 1/GPUs shard of it on each of the node's.
"""

from __future__ import annotations

import math
from pathlib import Path

from harness.learning.validation_scores import verl_metrics
from harness.probe.share import Share

PHASES = (("generation", "timing_s/gen"), ("old log-probs", "timing_s/old_log_prob"), ("reference", "timing_s/ref"),
          ("update", "timing_s/update_actor"), ("weight sync", "timing_s/update_weights"))
STATE_BYTES_PER_PARAMETER = 16  # fp32 weights + fp32 gradients + Adam's fp32 first and second moments
MIB_PER_GIB = 1024


def step_metrics(metrics_file: Path, step: int = 1) -> dict:
    """verl's last record of `step` in its file logger's JSON lines; {} when there is none."""
    return verl_metrics(metrics_file, step) if metrics_file.is_file() else {}


def _f(value, digits: int = 1) -> str:
    return "nan" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.{digits}f}"


def report(share: Share, metrics: dict, peaks_mib: dict[str, int], memory_note: str,
           parameters: int) -> tuple[list[str], str]:
    """The report's lines and its PROBE line, for the step's metrics (step_metrics) and the sampled peaks."""
    get = metrics.get
    step = get("timing_s/step")
    phases = {name: get(key) for name, key in PHASES}
    known = [v for v in phases.values() if v is not None]
    rest = step - sum(known) if step is not None and known else None
    trajectories = share.trajectories_per_gpu
    mean_response = get("response_length/mean")
    generated = mean_response * trajectories if mean_response is not None else None
    gen_tps = generated / phases["generation"] if generated and phases["generation"] else None
    actor_alloc, actor_reserved = get("actor/perf/max_memory_allocated_gb"), get("actor/perf/max_memory_reserved_gb")
    gib = {role: mib / MIB_PER_GIB for role, mib in peaks_mib.items()}
    state = STATE_BYTES_PER_PARAMETER * parameters / 2**30
    on_node = state / share.gpus
    # no GPU memory measured (the CPU stand-ins report 0): nothing to project
    projected_actor = actor_alloc - (state - on_node) if actor_alloc else None
    run_h = share.run_steps * step / 3600 if step is not None else None

    lines = [
        f"step 1: {_f(step)} s = " + " + ".join(f"{name} {_f(v)}" for name, v in phases.items())
        + f" + the rest {_f(rest)} (verl's timing_s/*)",
        f"generation: {trajectories} trajectories, {_f(generated, 0)} response tokens (mean {_f(mean_response)}, "
        f"clip ratio {_f(get('response_length/clip_ratio'), 2)}), {_f(gen_tps, 0)} tokens/s generated; verl's "
        f"throughput {_f(get('perf/throughput'), 0)} tokens/s a GPU (prompts and responses over the whole step)",
        f"memory: the actor's torch peak {_f(actor_alloc)} GiB allocated, {_f(actor_reserved)} GiB reserved (verl's "
        f"actor/perf/*); by nvidia-smi: "
        + (", ".join(f"{role} {_f(v)} GiB" for role, v in sorted(gib.items())) or memory_note),
        f"actor state: {_f(state)} GiB on this GPU ({STATE_BYTES_PER_PARAMETER} B x {parameters:,} parameters: fp32 "
        f"weights, gradients, Adam), {_f(on_node)} GiB a GPU on {share.gpus}",
        f"projection to {share.profile} ({share.gpus} GPUs): a step ~{_f(step)} s, the run ({share.run_steps} steps) "
        f"~{_f(run_h)} h of steps; the actor's peak ~{_f(projected_actor)} GiB a GPU",
        "  assumes: every GPU of the node runs this share at once (TP 1: an SGLang engine a GPU, data-parallel "
        "training); FSDP's all-gathers and reduce-scatters over NVLink, not measured here, add to the update and the "
        "log-probs; the optimizer's step, over 1/GPUs of the weights there, is shorter",
        "  an upper bound: every response ran to its limit (the real run's answers are shorter) and step 1 carries "
        "first-use costs (torch.compile's first pass, allocator warm-up); validations, checkpoints and the start "
        "are not in the run's hours",
    ]
    result = (f"PROBE step_s={_f(step)} gen_s={_f(phases['generation'])} old_log_prob_s={_f(phases['old log-probs'])} "
              f"ref_s={_f(phases['reference'])} update_s={_f(phases['update'])} "
              f"weight_sync_s={_f(phases['weight sync'], 2)} gen_tokens_per_s={_f(gen_tps, 0)} "
              f"actor_peak_gib={_f(actor_alloc)} sglang_peak_gib={_f(gib.get('SGLang'))} "
              f"gpu_peak_gib={_f(gib.get('GPU'))} projected_step_s={_f(step)} projected_run_h={_f(run_h, 2)} "
              f"projected_actor_peak_gib={_f(projected_actor)}")
    return lines, result


def memory_plan(share: Share, parameters: int, vocab: int, gpu_gib: float | None) -> list[str]:
    """Before the step: the actor's state on one GPU against the node's share of it, the logits of one micro-batch
    (verl's log-prob and entropy hold a few copies of them at once), and a warning where their sum already nears the
    GPU's memory (the update may then run out of it on one GPU where the node's GPUs, each with 1/GPUs of the
    state, would not)."""
    state = STATE_BYTES_PER_PARAMETER * parameters / 2**30
    logits = share.micro_batch * (share.prompt_length + share.response_length) * vocab * 2 / 2**30  # bf16, at most
    sglang = f"{share.memory_fraction} x {_f(gpu_gib)} GiB = {_f(share.memory_fraction * gpu_gib)} GiB" if gpu_gib \
        else f"{share.memory_fraction} of the GPU"
    lines = [f"memory     actor state {_f(state)} GiB on one GPU ({STATE_BYTES_PER_PARAMETER} B x {parameters:,} "
             f"parameters; {_f(state / share.gpus)} GiB a GPU on {share.gpus}); the logits of a micro-batch of "
             f"{share.micro_batch} up to {_f(logits)} GiB (bf16, a few copies at once in verl's log-probs); SGLang "
             f"{sglang} while it generates, asleep during the update"]
    if gpu_gib and state + 2 * logits > 0.9 * gpu_gib:
        lines.append(f"WARNING: state and two copies of the logits ({_f(state + 2 * logits)} GiB) near this GPU's "
                     f"{_f(gpu_gib)} GiB: the update may run out of memory on one GPU, where each of the node's "
                     f"{share.gpus} holds {_f(state / share.gpus)} GiB of state; MICRO_BATCH=16 measures a smaller "
                     "micro-batch (a failure still reports the memory sampled up to it)")
    return lines
