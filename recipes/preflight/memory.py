"""The memory plan: what one GPU holds at each phase of a GRPO step, from the model's config.json (recipes/models.py)
and the composed config, against the GPU's memory. The dry run prints it as its `memory` row; the preflight refuses
a launch whose estimate does not fit, naming the cheapest change that would (docs/configuration.md#memory).

How verl 0.9.1 and SGLang 0.5.12 share a GPU (hybrid engine, read in their sources):
- The actor's FSDP shards (fp32 parameters, fp32 gradients, Adam's two fp32 moments) stay on the GPU through the
  whole step unless actor.fsdp_config.param_offload / optimizer_offload move them to the CPU between phases
  (verl/workers/engine/base.py, BaseEngineCtx: loaded again for every forward and update). Adam's moments appear at
  the first update; gradients are freed after each update (zero_grad on leaving train mode).
- The reference model is CPU-offloaded by verl (FSDP CPUOffload / CPUOffloadPolicy for forward-only engines,
  verl/workers/engine/fsdp/transformer_impl.py): its layers visit the GPU one at a time.
- SGLang takes gpu_memory_utilization of the memory FREE when it starts (after the actor's parameters; SGLang's
  profile_max_num_token: rest = free_after_weights - free_before_weights * (1 - fraction)) for its bf16 weights and
  KV cache. With free_cache_engine (verl's default) it releases both while the actor computes
  (async_sglang_server.py sleep(): tags kv_cache and weights) and takes them back for the rollout: SGLang's share
  and the actor's activations alternate; the actor's shards and SGLang's share add up. SGLang's context and CUDA
  graphs stay.
- Activations of the actor: verl packs each micro-batch's sequences into one row (use_remove_padding) and computes
  log-probs from bf16 logits over the whole vocabulary, a row at a time, without flash-attn's fused cross-entropy
  (verl/utils/torch_functional.py, logprobs_from_logits_v2): the logits, the saved log-softmax rows and their
  gradient are three [tokens x vocab] bf16 tensors at the peak. With gradient checkpointing each block keeps its
  input; one block is recomputed at a time. sdpa attention over a packed row builds a dense [tokens x tokens] mask
  (transformers/masking_utils.py) that torch turns into a bf16 bias for its memory-efficient kernel.

Estimates, not measurements: docs/configuration.md#memory says how far off they were where a GPU measured them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass, field, replace

from recipes.config_view import ConfigView
from recipes.models import BF16_BYTES, ModelSize, ModelSource, model_size, qwen25_hub_ids, table_entry
from recipes.preflight.division import MEMORY

GIB = 1 << 30
TIGHT = 0.9  # a plan above this share of the GPU is within the estimate's error of not fitting
FIX_MARGIN = 0.85  # a change is offered as a fix when its plan stays below this share of the GPU
CONTEXT_GIB = 0.5  # a process's CUDA context and NCCL (the 1-GPU smoke's actor: 0.51 GiB before any tensor)
# SGLang beyond its static share: its context, CUDA graphs (1.0 GiB in the 1-GPU smoke's capture) and buffers;
# kept while it sleeps
SGLANG_OVERHEAD_GIB = 2.0
LOGITS_COPIES = 3  # bf16 [tokens x vocab] tensors at the update's peak: logits, saved log-softmax rows, their grad
ADAM_BYTES = 8  # two fp32 moments per trainable parameter
GRAD_BYTES = 4  # fp32
SGLANG_PREFILL_CHUNK = 8192  # tokens SGLang prefills at a time (its chunked_prefill_size on an H100)
DTYPE_BYTES = {"fp32": 4, "float32": 4, "bf16": 2, "bfloat16": 2, "fp16": 2, "float16": 2}


def gpu_memory(knob: float | None = None, card: float | None = None, environ=None) -> tuple[float | None, str]:
    """(GiB of the smallest visible GPU, where that figure comes from): nvidia-smi where it answers, else the
    GPU_MEMORY_GB knob (the launcher hands it over), else the card the profile is for (recipe.gpu_memory_gb); None
    when nothing says."""
    environ = os.environ if environ is None else environ
    smi = shutil.which("nvidia-smi", path=environ.get("PATH"))
    if smi and not environ.get("PREFLIGHT_VISIBLE_GPUS"):  # the tests' and odd clusters' GPU count: no real GPU
        try:
            out = subprocess.run([smi, "--query-gpu=memory.total", "--format=csv,noheader,nounits"],
                                 capture_output=True, text=True, timeout=30).stdout
            sizes = [float(line) / 1024 for line in out.split() if line.strip().replace(".", "", 1).isdigit()]
        except (OSError, subprocess.SubprocessError):
            sizes = []
        if sizes:
            return min(sizes), "nvidia-smi"
    if knob:
        return float(knob), "GPU_MEMORY_GB"
    if card:
        return float(card), "the card the profile is for (recipe.gpu_memory_gb), no nvidia-smi here"
    return None, "no nvidia-smi here, no GPU_MEMORY_GB and no recipe.gpu_memory_gb"


@dataclass
class MemoryPlan:
    """One GPU's memory at each phase of a step, in GiB (what nvidia-smi and verl's logs call GB)."""

    gpu: float
    gpu_source: str
    size: ModelSize
    size_source: str
    training: bool
    params: float
    grads: float
    adam: float
    where: str  # what the shards hold and where they live between phases
    train_tokens: int
    activations: float  # the update's, at its micro-batch
    checkpointing: bool
    sglang_weights: float
    sglang_kv: float
    kv_tokens: int  # per engine
    sglang_alternates: bool  # free_cache_engine: SGLang's share released while the actor computes
    sequence: int  # the configured prompt + response tokens
    phases: dict[str, float] = field(default_factory=dict)
    changes: dict = field(default_factory=dict)  # the overrides a fix made (cheapest_fix)

    @property
    def peak_phase(self) -> str:
        return max(self.phases, key=self.phases.get)

    @property
    def peak(self) -> float:
        return self.phases[self.peak_phase]

    @property
    def fits(self) -> bool:
        return self.peak <= self.gpu

    @property
    def tight(self) -> bool:
        return self.peak > TIGHT * self.gpu

    def row(self) -> str:
        sglang = (f"SGLang {self.sglang_weights + self.sglang_kv:.0f} GB while rolling out (weights "
                  f"{self.sglang_weights:.1f} + KV cache {self.sglang_kv:.0f}, ~{_tokens(self.kv_tokens)} tokens an "
                  "engine)")
        sglang += ", released while the actor computes" if self.sglang_alternates else ", held all step"
        if self.training:
            actor = (f"FSDP shards {self.params + self.grads + self.adam:.1f} GB (params {self.params:.1f}, grads "
                     f"{self.grads:.1f}, Adam {self.adam:.1f}; {self.where}), activations ~{self.activations:.0f} GB "
                     f"at {self.train_tokens // self.sequence} x {self.sequence} tokens (checkpointing "
                     f"{'on' if self.checkpointing else 'off'})")
        else:
            actor = f"the actor's parameters {self.params:.1f} GB ({self.where})"
        return (f"~{self.peak:.0f} of {self.gpu:.0f} GB a GPU at its peak, {self.peak_phase} (an estimate: "
                f"docs/configuration.md#memory): {actor}; {sglang}; {self.gpu:.0f} GB: {self.gpu_source}; "
                f"{self.size.parameters / 1e9:.2f}B parameters from {self.size_source}")


def _tokens(n: int) -> str:
    return f"{n / 1e6:.1f}M" if n >= 1e6 else f"{n / 1e3:.0f}k"


def _micro_tokens(view: ConfigView, micro: int | None, max_tokens: int | None) -> int:
    """Tokens of one micro-batch, packed: its sequences at the configured lengths, or the token cap of verl's
    dynamic batching."""
    if view.dynamic_batch:
        return int(max_tokens or view.sequence)
    return int(micro or 1) * view.sequence


def _attention_mask_bytes(view: ConfigView, tokens: int) -> int:
    """sdpa over a packed micro-batch: a bool [tokens x tokens] mask and its bf16 bias for torch's kernel."""
    sdpa = view.attn_implementation == "sdpa"
    return (1 + BF16_BYTES) * tokens * tokens if sdpa and view.remove_padding else 0


def _block_bytes(size: ModelSize, tokens: int) -> int:
    """One transformer block's forward tensors for `tokens` (norms, q/k/v, attention, MLP's gate, up and product)."""
    return tokens * (6 * size.hidden + 4 * size.intermediate) * BF16_BYTES


def train_activation_bytes(view: ConfigView, size: ModelSize, tokens: int) -> int:
    logits = LOGITS_COPIES * BF16_BYTES * tokens * size.vocab
    block = _block_bytes(size, tokens)
    if view.gradient_checkpointing:
        kept = BF16_BYTES * tokens * size.hidden * size.layers + 2 * block  # block inputs; one block and its grads
    else:
        kept = size.layers * block + block
    return logits + kept + _attention_mask_bytes(view, tokens)


def forward_activation_bytes(view: ConfigView, size: ModelSize, tokens: int, entropy: bool) -> int:
    """A forward without gradients: the logits, and with the entropy (old log-probs) softmax and its product."""
    copies = 3 if entropy else 1
    return (copies * BF16_BYTES * tokens * size.vocab + _block_bytes(size, tokens)
            + _attention_mask_bytes(view, tokens))


def plan_memory(view: ConfigView, size: ModelSize, size_source: str, gpu: float, gpu_source: str) -> MemoryPlan:
    world = view.gpus
    shard = view.fsdp_size if 0 < view.fsdp_size <= world else world
    rank = view.lora
    trainable = size.lora_parameters(rank) if rank else size.parameters
    param_bytes = DTYPE_BYTES.get(view.model_dtype, 4)
    training = not view.val_only

    params = param_bytes * (size.parameters + (trainable if rank else 0)) / shard / GIB
    grads = GRAD_BYTES * trainable / shard / GIB if training else 0.0
    adam = ADAM_BYTES * trainable / shard / GIB if training else 0.0
    cpu_policy = view.strategy == "fsdp2" and view.offload_policy
    param_off = view.param_offload or cpu_policy
    optim_off = view.optimizer_offload or cpu_policy
    where = f"LoRA rank {rank}: gradients and Adam for the adapters only" if rank else "full fine-tuning"
    if not training:
        where = "an evaluation: no gradients, no Adam"
    if param_off or optim_off:
        moved = " and ".join(x for x, on in (("parameters", param_off), ("Adam", optim_off)) if on)
        where += f"; {moved} on the CPU between phases"
    where += "; the reference model on the CPU"
    if cpu_policy:  # FSDP2's CPUOffloadPolicy: the shards never live on the GPU; the optimizer steps on the CPU
        params = grads = adam = 0.0
    # all-gathered bf16 copies while a block computes (and the next one prefetched), and the embedding's unit
    gathered = (2 * 2 * BF16_BYTES * size.layer_parameters + BF16_BYTES * size.embedding_parameters) / GIB

    train_tokens = _micro_tokens(view, view.actor_micro_batch, view.actor_max_tokens)
    old_tokens = _micro_tokens(view, view.log_prob_micro_batch, view.log_prob_max_tokens)
    ref_tokens = _micro_tokens(view, view.ref_micro_batch, view.ref_max_tokens)
    activations = train_activation_bytes(view, size, train_tokens) / GIB

    # SGLang: its share of what is free when it starts, after the actor's parameters (Adam comes later)
    tp = view.tensor_parallel
    free_at_start = gpu - 2 * CONTEXT_GIB - (0.0 if param_off else params)
    static = max(0.0, view.gpu_memory_utilization * free_at_start)
    weights = BF16_BYTES * size.parameters / tp / GIB
    kv = max(0.0, static - weights)
    kv_per_token = size.kv_bytes_per_token / min(tp, size.kv_heads)  # KV heads split over TP, replicated past them
    kv_tokens = int(kv * GIB / kv_per_token) if kv_per_token else 0
    sampling = ((view.max_num_seqs or 256) * size.vocab * 4
                + SGLANG_PREFILL_CHUNK * (4 * size.hidden + 3 * size.intermediate) * BF16_BYTES / tp) / GIB
    alternates = view.free_cache_engine
    asleep = SGLANG_OVERHEAD_GIB + (0.0 if alternates else static)

    resident_params = 0.0 if param_off else params
    resident_adam = 0.0 if optim_off else adam
    phases = {"rollout": CONTEXT_GIB + resident_params + resident_adam + static + SGLANG_OVERHEAD_GIB + sampling}
    if training:
        phases["training"] = CONTEXT_GIB + params + grads + adam + gathered + activations + asleep
        old = forward_activation_bytes(view, size, old_tokens, entropy=True) / GIB
        phases["old log-probs"] = CONTEXT_GIB + params + resident_adam + gathered + old + asleep
        if view.use_kl_loss and not rank:  # with LoRA the actor without adapters is it
            ref = forward_activation_bytes(view, size, ref_tokens, entropy=False) / GIB + gathered
            phases["reference log-probs"] = CONTEXT_GIB + params + resident_adam + ref + asleep
    return MemoryPlan(gpu=gpu, gpu_source=gpu_source, size=size, size_source=size_source, training=training,
                      params=params, grads=grads, adam=adam, where=where, train_tokens=train_tokens,
                      activations=activations, checkpointing=view.gradient_checkpointing, sglang_weights=weights,
                      sglang_kv=kv, kv_tokens=kv_tokens, sglang_alternates=alternates, sequence=view.sequence,
                      phases=phases)


def plan_for(view: ConfigView, model: ModelSource, gpu_memory_gb: float | None = None,
             environ=None) -> tuple[MemoryPlan | None, str]:
    """The plan for a launch's config and model, or None and why not (no model size known, not an SGLang
    rollout). `gpu_memory_gb`: the GPU_MEMORY_GB knob."""
    if view.rollout_name != "sglang":
        return None, f"not planned: the rollout is {view.rollout_name}, not SGLang on GPUs"
    size, source = model.size()
    if size is None:
        return None, f"not planned: {model.name}: {source}"
    gpu, gpu_source = gpu_memory(gpu_memory_gb, view.card_gb, environ)
    if gpu is None:
        return None, f"not planned: {gpu_source}"
    return plan_memory(view, size, source, gpu, gpu_source), ""


# ---- the cheapest change that fits ------------------------------------------------------------------------

# the micro-batches a fix may make smaller, as the view names them, and their config keys
MICRO_FIELDS = ("actor_micro_batch", "log_prob_micro_batch", "ref_micro_batch")
MICRO_KEYS = tuple(ConfigView.key_of(name) for name in MICRO_FIELDS)


def _fits(view: ConfigView, plan: MemoryPlan, updates: dict, breaks, size: ModelSize | None = None,
          source: str | None = None) -> MemoryPlan | None:
    """The plan with these changes (view fields), and smaller micro-batches if they need them, when it fits with
    FIX_MARGIN and the changed view breaks no other rule of the preflight (`breaks`) that the launch keeps now."""
    kept = set(breaks(view))
    micro = max(getattr(view, name) or 1 for name in MICRO_FIELDS)
    while True:
        changed = {**updates, **{name: min(micro, getattr(view, name) or micro) for name in MICRO_FIELDS}}
        candidate = replace(view, **changed)
        found = plan_memory(candidate, size or plan.size, source or plan.size_source, plan.gpu, plan.gpu_source)
        if found.peak <= FIX_MARGIN * plan.gpu and not [b for b in breaks(candidate) if b not in (MEMORY, *kept)]:
            found.changes = changed
            return found
        if micro <= 1 or view.dynamic_batch:
            return None
        micro //= 2


def _said(plan: MemoryPlan, view: ConfigView) -> str:
    """The overrides of a fix (what differs from the launch's config), and what the plan then comes to."""
    changed = {name: value for name, value in plan.changes.items() if getattr(view, name) != value}
    micro = [name for name in changed if name in MICRO_FIELDS]
    text = " ".join(f"{ConfigView.key_of(name)}={value}" for name, value in changed.items())
    if micro:
        text += f" (micro-batches of {changed[micro[0]]}; slower)"
    return f"{text}: ~{plan.peak:.0f} GB"


def cheapest_fix(view: ConfigView, plan: MemoryPlan, breaks=lambda view: []) -> str | None:
    """The first change, from least to most disruptive to the run, whose plan fits with room for the estimate's
    error (each with smaller micro-batches if it needs them): smaller micro-batches alone (the same training,
    slower), the actor's parameters and Adam offloaded between phases, LoRA, a smaller model, more GPUs. None when
    none does."""
    offload = {"param_offload": True, "optimizer_offload": True}
    lora = {"lora_rank": 64, "lora_alpha": 32, "lora_merge": True, "lr": 3e-5}
    for label, updates in (("", {}), ("offload: ", offload), ("LoRA as config/profile/lora.yaml: ", lora)):
        if label.startswith("LoRA") and view.val_only:
            continue
        found = _fits(view, plan, updates, breaks)
        if found:
            return label + _said(found, view)
    if table_entry(plan.size.name):
        for hub_id in reversed(qwen25_hub_ids()):
            smaller, source = model_size(hub_id)
            if smaller and smaller.parameters < plan.size.parameters:
                found = _fits(view, plan, {}, breaks, smaller, source)
                if found:
                    return f"a smaller model: MODEL_PATH={hub_id} " + _said(found, view)
    per_node = view.gpus_per_node
    for more in (2, 4, 8):
        found = _fits(view, plan, {"gpus_per_node": per_node * more}, breaks)
        if found:
            return f"more GPUs: N_GPUS_PER_NODE={per_node * more} (or as many over several nodes) " + \
                _said(found, view)
    return None


def plan_trouble(view: ConfigView, plan: MemoryPlan) -> str | None:
    """What check_memory would say of this plan, in a word (None: nothing)."""
    if plan.sglang_kv < _one_trajectory_kv(view, plan):
        return "no room for SGLang"
    return "does not fit" if not plan.fits else "tight" if plan.tight else None


def check_memory(view: ConfigView, plan: MemoryPlan | None, report, breaks=lambda view: []) -> None:
    """A launch whose plan does not fit its GPUs is refused, in one line with the cheapest change that fits (and
    breaks no other rule of the preflight: `breaks`); one within the estimate's error of not fitting is warned
    about."""
    if plan is None:
        return
    if plan.sglang_kv < _one_trajectory_kv(view, plan):
        report.error(f"memory: SGLang's share ({view.gpu_memory_utilization} of the "
                     f"~{plan.gpu - 2 * CONTEXT_GIB - plan.params:.0f} GB free when it starts) cannot hold the "
                     f"{plan.size.name} weights ({plan.sglang_weights:.1f} GB) and one trajectory's KV cache; raise "
                     "actor_rollout_ref.rollout.gpu_memory_utilization or use more GPUs (docs/configuration.md#memory)")
    elif not plan.fits:
        fix = cheapest_fix(view, plan, breaks)
        report.error(f"memory: ~{plan.peak:.0f} GB per GPU at its peak ({plan.peak_phase}) does not fit "
                     f"{plan.gpu:.0f} GB ({plan.gpu_source}); " +
                     (f"the cheapest fix: {fix}" if fix else "no single change found that fits: more GPUs with LoRA") +
                     " (docs/configuration.md#memory)")
    elif plan.tight:
        report.warn(f"memory: ~{plan.peak:.0f} of {plan.gpu:.0f} GB per GPU at its peak ({plan.peak_phase}): within "
                    "the estimate's error of not fitting (docs/configuration.md#memory)")


def _one_trajectory_kv(view: ConfigView, plan: MemoryPlan) -> float:
    return plan.sequence * plan.size.kv_bytes_per_token / min(view.tensor_parallel, plan.size.kv_heads) / GIB
