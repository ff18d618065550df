"""What one timed step of a share shows, from verl's own metrics of it (its `file` logger: timing_s/*, response
lengths, perf/*, the actor's torch memory peak) and the GPU memory sampled beside it; and the projection onto the
profile's node and run, each figure with the measured phase it scales and what in it is an upper bound.

    [probe] step 1: 87.2 s = generation 24.1 + old log-probs 10.2 + reference 10.9 + update 38.0 + weight sync 2.3
            + the rest 1.7
    [probe] projection to 8xh100 (8 GPUs), phase by phase: ...
    PROBE step_s=<s> gen_s=<s> old_log_prob_s=<s> ref_s=<s> update_s=<s> weight_sync_s=<s> gen_tokens_per_s=<n>
          actor_peak_gib=<g> sglang_peak_gib=<g> gpu_peak_gib=<g> update_micro_batch=<n> log_prob_micro_batch=<n>
          planned_actor_peak_gib=<g> projected_step_s=<s> projected_run_h=<h> projected_actor_peak_gib=<g>

(one line each; `nan` where a figure is missing). The step projects phase by phase: each GPU of the node runs the same
share at once, so a phase measured here at the node's own settings is 1:1 with a node GPU's, and one measured with
what only one GPU does (the whole actor offloaded to the CPU between phases, the reference's layers copied whole for
every micro-batch, a smaller micro-batch for the update) is an upper bound for it. The actor's peak on a node GPU is
the memory plan's (memory_fit.py): the peak measured here is the worker's over all its passes with the whole state on
one GPU, which no subtraction turns into a node GPU's.
"""

from __future__ import annotations

import math
from pathlib import Path

from harness.learning.validation_scores import verl_metrics
from harness.probe.memory_fit import Planned
from harness.probe.share import Share

PHASES = (("generation", "timing_s/gen"), ("old log-probs", "timing_s/old_log_prob"), ("reference", "timing_s/ref"),
          ("update", "timing_s/update_actor"), ("weight sync", "timing_s/update_weights"))
STATE_BYTES_PER_PARAMETER = 16  # fp32 weights + fp32 gradients + Adam's fp32 first and second moments
FP32, BF16, ADAM = 4, 2, 8  # bytes a parameter: the actor's weights, the reference's copies, Adam's two moments
MIB_PER_GIB = 1024


def step_metrics(metrics_file: Path, step: int = 1) -> dict:
    """verl's last record of `step` in its file logger's JSON lines; {} when there is none."""
    return verl_metrics(metrics_file, step) if metrics_file.is_file() else {}


def _f(value, digits: int = 1) -> str:
    return "nan" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.{digits}f}"


def _gib(n_bytes: float) -> str:
    return f"{n_bytes / 2**30:,.1f}"


def phase_bases(share: Share, parameters: int, profile_micro_batch: int) -> dict[str, str]:
    """For each phase: how its time here maps onto a node GPU's, and what makes it an upper bound."""
    gpus, lp, mb = share.gpus, share.log_prob_micro_batch, share.micro_batch
    ref_passes = share.passes(lp)
    ref_here = ref_passes * parameters * BF16
    at_lp = f"micro-batch {lp}" + (" (the profile's)" if lp == profile_micro_batch else
                                   f" (the profile's is {profile_micro_batch}: more passes here)")
    return {
        "generation": f"1:1: a node GPU's engine generates the same {share.trajectories_per_gpu} trajectories with the "
                      "same SGLang settings",
        "old log-probs": f"1:1 at {at_lp}; an upper bound: this GPU loads the actor's {_gib(parameters * FP32)} GiB of "
                         "fp32 weights from the CPU and back (offload), a node GPU keeps its shard",
        "reference": f"1:1 at {at_lp}; an upper bound: verl's CPU offload of the reference copies the whole model to "
                     f"this GPU for each of {ref_passes} micro-batches ({_gib(ref_here)} GiB), a node GPU 1/{gpus} of "
                     f"it ({_gib(ref_here / gpus)} GiB), all-gathering the rest over NVLink (not measured)",
        "update": f"an upper bound: micro-batch {mb} (the profile's {profile_micro_batch}: the same tokens in more "
                  f"passes), Adam over the whole state (a node GPU's: 1/{gpus}), the weights and Adam's moments copied "
                  f"from the CPU and back ({_gib(parameters * (FP32 + ADAM))} GiB each way, offload); FSDP's "
                  "all-gathers and reduce-scatters over NVLink, not measured here, add to a node's",
        "weight sync": "1:1 but the weights loaded from the CPU first (offload): the whole model to one engine, as on "
                       "each node GPU",
    }


def report(share: Share, metrics: dict, peaks_mib: dict[str, int], memory_note: str, parameters: int,
           planned: Planned) -> tuple[list[str], str]:
    """The report's lines and its PROBE line, for the step's metrics (step_metrics), the sampled peaks and the plan."""
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
    run_h = share.run_steps * step / 3600 if step is not None else None
    here, node = planned.this_run, planned.node
    ratio = actor_alloc / here.gib if actor_alloc and here.gib else None
    checked = (f"measured {_f(actor_alloc)} GiB: {_f(ratio, 2)}x the plan" if ratio else
               "no GPU memory measured here to check it against")
    bases = phase_bases(share, parameters, planned.profile_micro_batch)

    lines = [
        f"step 1: {_f(step)} s = " + " + ".join(f"{name} {_f(v)}" for name, v in phases.items())
        + f" + the rest {_f(rest)} (verl's timing_s/*)",
        f"generation: {trajectories} trajectories, {_f(generated, 0)} response tokens (mean {_f(mean_response)}, "
        f"clip ratio {_f(get('response_length/clip_ratio'), 2)}), {_f(gen_tps, 0)} tokens/s generated; verl's "
        f"throughput {_f(get('perf/throughput'), 0)} tokens/s a GPU (prompts and responses over the whole step)",
        f"memory: the actor's torch peak {_f(actor_alloc)} GiB allocated, {_f(actor_reserved)} GiB reserved (verl's "
        f"actor/perf/*: read once, after the update, over all the worker's passes); by nvidia-smi: "
        + (", ".join(f"{role} {_f(v)} GiB" for role, v in sorted(gib.items())) or memory_note),
        f"memory plan for this run: the actor's peak ~{_f(here.gib)} GiB ({here.phase}; {_f(state)} GiB of state, "
        f"offloaded between phases, micro-batches {share.micro_batch} and {share.log_prob_micro_batch}); {checked}",
        f"projection to {share.profile} ({share.gpus} GPUs), phase by phase (every GPU of the node runs this share at "
        "once, TP 1: an SGLang engine a GPU, data-parallel training):",
        *(f"  {name:<13} {_f(phases[name]):>6} s  {bases[name]}" for name, _ in PHASES),
        f"  {'the rest':<13} {_f(rest):>6} s  1:1",
        f"  a step ~{_f(step)} s, the run ({share.run_steps} steps) ~{_f(run_h)} h of steps: an upper bound (the "
        "phases above; every response ran to its limit, the real run's answers are shorter; step 1 carries first-use "
        "costs: torch.compile's first pass, the allocator's warm-up); validations, checkpoints and the start are not "
        "in the hours",
        f"  the actor's peak ~{_f(node.gib)} GiB a GPU ({node.phase}, micro-batch {planned.profile_micro_batch}, "
        f"1/{share.gpus} of the state, nothing offloaded): the memory plan's for the node "
        f"(recipes/preflight/memory.py, a {_f(planned.gpu_gib)} GiB GPU: {planned.gpu_source}), not measured here"
        + (f"; this run measured {_f(ratio, 2)}x the plan's figure for it" if ratio else ""),
    ]
    result = (f"PROBE step_s={_f(step)} gen_s={_f(phases['generation'])} old_log_prob_s={_f(phases['old log-probs'])} "
              f"ref_s={_f(phases['reference'])} update_s={_f(phases['update'])} "
              f"weight_sync_s={_f(phases['weight sync'], 2)} gen_tokens_per_s={_f(gen_tps, 0)} "
              f"actor_peak_gib={_f(actor_alloc)} sglang_peak_gib={_f(gib.get('SGLang'))} "
              f"gpu_peak_gib={_f(gib.get('GPU'))} update_micro_batch={share.micro_batch} "
              f"log_prob_micro_batch={share.log_prob_micro_batch} planned_actor_peak_gib={_f(here.gib)} "
              f"projected_step_s={_f(step)} projected_run_h={_f(run_h, 2)} projected_actor_peak_gib={_f(node.gib)}")
    return lines, result


def plan_lines(share: Share, planned: Planned) -> list[str]:
    """Before the launch: the micro-batches this GPU runs and the actor's planned peaks, here and on the node."""
    return [f"plan       micro-batches: the update {share.micro_batch} (MICRO_BATCH), the reference and old log-probs "
            f"{share.log_prob_micro_batch} (the profile's {planned.profile_micro_batch}; the largest up to it the plan "
            f"fits here unless LOG_PROB_MICRO_BATCH says); the actor's peak ~{_f(planned.this_run.gib)} GiB here "
            f"({planned.this_run.phase}), ~{_f(planned.node.gib)} GiB a GPU on the node ({planned.node.phase}), by the "
            f"memory plan on a {_f(planned.gpu_gib)} GiB GPU ({planned.gpu_source})"]


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
                     f"{share.gpus} holds {_f(state / share.gpus)} GiB of state; a smaller MICRO_BATCH measures a "
                     "smaller micro-batch (a failure still reports the memory sampled up to it)")
    return lines
