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
from dataclasses import dataclass, field

from omegaconf import DictConfig, OmegaConf

from recipes.models import BF16_BYTES, ModelSize, model_size, qwen25_hub_ids, table_entry

GIB = 1 << 30
DEFAULT_GPU_MEMORY_GB = 80  # GPU_MEMORY_GB's meaning when it is empty and no nvidia-smi answers
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
A = "actor_rollout_ref"


class _Changed:
    """A config read with some keys changed, without copying it: a fix is tried dozens of times."""

    def __init__(self, config: DictConfig, updates: dict):
        self.config, self.updates = config, updates


def _get(config: DictConfig | _Changed, key: str, default=None):
    if isinstance(config, _Changed):
        if key in config.updates:
            return config.updates[key]
        config = config.config
    value = OmegaConf.select(config, key)
    return default if value is None else value


def gpu_memory(environ=None) -> tuple[float, str]:
    """(GiB of the smallest visible GPU, where that figure comes from): nvidia-smi where it answers, else the
    GPU_MEMORY_GB knob, else DEFAULT_GPU_MEMORY_GB."""
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
    knob = environ.get("GPU_MEMORY_GB", "")
    if knob:
        return float(knob), "GPU_MEMORY_GB"
    return float(DEFAULT_GPU_MEMORY_GB), "GPU_MEMORY_GB's default, no nvidia-smi here"


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


def _micro_tokens(config: DictConfig, micro_key: str, token_key: str, sequence: int) -> int:
    """Tokens of one micro-batch, packed: its sequences at the configured lengths, or the token cap of verl's
    dynamic batching."""
    if _get(config, f"{A}.actor.use_dynamic_bsz", False):
        return int(_get(config, token_key, sequence))
    return int(_get(config, micro_key, 1)) * sequence


def _attention_mask_bytes(config: DictConfig, tokens: int) -> int:
    """sdpa over a packed micro-batch: a bool [tokens x tokens] mask and its bf16 bias for torch's kernel."""
    sdpa = str(_get(config, f"{A}.model.override_config.attn_implementation", "")) == "sdpa"
    packed = bool(_get(config, f"{A}.model.use_remove_padding", False))
    return (1 + BF16_BYTES) * tokens * tokens if sdpa and packed else 0


def _block_bytes(size: ModelSize, tokens: int) -> int:
    """One transformer block's forward tensors for `tokens` (norms, q/k/v, attention, MLP's gate, up and product)."""
    return tokens * (6 * size.hidden + 4 * size.intermediate) * BF16_BYTES


def train_activation_bytes(config: DictConfig, size: ModelSize, tokens: int) -> int:
    logits = LOGITS_COPIES * BF16_BYTES * tokens * size.vocab
    block = _block_bytes(size, tokens)
    if _get(config, f"{A}.model.enable_gradient_checkpointing", False):
        kept = BF16_BYTES * tokens * size.hidden * size.layers + 2 * block  # block inputs; one block and its grads
    else:
        kept = size.layers * block + block
    return logits + kept + _attention_mask_bytes(config, tokens)


def forward_activation_bytes(config: DictConfig, size: ModelSize, tokens: int, entropy: bool) -> int:
    """A forward without gradients: the logits, and with the entropy (old log-probs) softmax and its product."""
    copies = 3 if entropy else 1
    return (copies * BF16_BYTES * tokens * size.vocab + _block_bytes(size, tokens)
            + _attention_mask_bytes(config, tokens))


def plan_memory(config: DictConfig | _Changed, size: ModelSize, size_source: str, gpu: float,
                gpu_source: str) -> MemoryPlan:
    actor, rollout = f"{A}.actor", f"{A}.rollout"
    fsdp = f"{actor}.fsdp_config"
    world = int(_get(config, "trainer.nnodes", 1)) * int(_get(config, "trainer.n_gpus_per_node", 1))
    fsdp_size = int(_get(config, f"{fsdp}.fsdp_size", -1))
    shard = fsdp_size if 0 < fsdp_size <= world else world
    # verl reads two LoRA blocks (FSDP: model.lora_rank; Megatron: model.lora.rank), as rollout_checks.lora_rank
    rank = max(int(_get(config, f"{A}.model.lora_rank", 0) or 0), int(_get(config, f"{A}.model.lora.rank", 0) or 0))
    trainable = size.lora_parameters(rank) if rank else size.parameters
    param_bytes = DTYPE_BYTES.get(str(_get(config, f"{fsdp}.model_dtype", "fp32")), 4)
    training = not _get(config, "trainer.val_only", False)

    params = param_bytes * (size.parameters + (trainable if rank else 0)) / shard / GIB
    grads = GRAD_BYTES * trainable / shard / GIB if training else 0.0
    adam = ADAM_BYTES * trainable / shard / GIB if training else 0.0
    cpu_policy = _get(config, f"{actor}.strategy") == "fsdp2" and _get(config, f"{fsdp}.offload_policy", False)
    param_off = bool(_get(config, f"{fsdp}.param_offload", False)) or cpu_policy
    optim_off = bool(_get(config, f"{fsdp}.optimizer_offload", False)) or cpu_policy
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

    sequence = int(_get(config, "data.max_prompt_length")) + int(_get(config, "data.max_response_length"))
    train_tokens = _micro_tokens(config, f"{actor}.ppo_micro_batch_size_per_gpu", f"{actor}.ppo_max_token_len_per_gpu",
                                 sequence)
    old_tokens = _micro_tokens(config, f"{rollout}.log_prob_micro_batch_size_per_gpu",
                               f"{rollout}.log_prob_max_token_len_per_gpu", sequence)
    ref_tokens = _micro_tokens(config, f"{A}.ref.log_prob_micro_batch_size_per_gpu",
                               f"{A}.ref.log_prob_max_token_len_per_gpu", sequence)
    activations = train_activation_bytes(config, size, train_tokens) / GIB

    # SGLang: its share of what is free when it starts, after the actor's parameters (Adam comes later)
    tp = int(_get(config, f"{rollout}.tensor_model_parallel_size", 1))
    fraction = float(_get(config, f"{rollout}.gpu_memory_utilization", 0.5))
    free_at_start = gpu - 2 * CONTEXT_GIB - (0.0 if param_off else params)
    static = max(0.0, fraction * free_at_start)
    weights = BF16_BYTES * size.parameters / tp / GIB
    kv = max(0.0, static - weights)
    kv_per_token = size.kv_bytes_per_token / min(tp, size.kv_heads)  # KV heads split over TP, replicated past them
    kv_tokens = int(kv * GIB / kv_per_token) if kv_per_token else 0
    sampling = (int(_get(config, f"{rollout}.max_num_seqs", 256)) * size.vocab * 4
                + SGLANG_PREFILL_CHUNK * (4 * size.hidden + 3 * size.intermediate) * BF16_BYTES / tp) / GIB
    alternates = bool(_get(config, f"{rollout}.free_cache_engine", True))
    asleep = SGLANG_OVERHEAD_GIB + (0.0 if alternates else static)

    resident_params = 0.0 if param_off else params
    resident_adam = 0.0 if optim_off else adam
    phases = {"rollout": CONTEXT_GIB + resident_params + resident_adam + static + SGLANG_OVERHEAD_GIB + sampling}
    if training:
        phases["training"] = CONTEXT_GIB + params + grads + adam + gathered + activations + asleep
        old = forward_activation_bytes(config, size, old_tokens, entropy=True) / GIB
        phases["old log-probs"] = CONTEXT_GIB + params + resident_adam + gathered + old + asleep
        if _get(config, f"{actor}.use_kl_loss", False) and not rank:  # with LoRA the actor without adapters is it
            ref = forward_activation_bytes(config, size, ref_tokens, entropy=False) / GIB + gathered
            phases["reference log-probs"] = CONTEXT_GIB + params + resident_adam + ref + asleep
    plan = MemoryPlan(gpu=gpu, gpu_source=gpu_source, size=size, size_source=size_source, training=training,
                      params=params, grads=grads, adam=adam, where=where, train_tokens=train_tokens,
                      activations=activations,
                      checkpointing=bool(_get(config, f"{A}.model.enable_gradient_checkpointing", False)),
                      sglang_weights=weights, sglang_kv=kv, kv_tokens=kv_tokens, sglang_alternates=alternates,
                      sequence=sequence, phases=phases)
    return plan


def plan_for(config: DictConfig, environ=None) -> tuple[MemoryPlan | None, str]:
    """The plan for a composed config, or None and why not (no model size known, not an SGLang rollout)."""
    if _get(config, f"{A}.rollout.name") != "sglang":
        return None, f"not planned: the rollout is {_get(config, f'{A}.rollout.name')}, not SGLang on GPUs"
    model = str(_get(config, f"{A}.model.path"))
    size, source = model_size(model)
    if size is None:
        return None, f"not planned: {model}: {source}"
    gpu, gpu_source = gpu_memory(environ)
    return plan_memory(config, size, source, gpu, gpu_source), ""


# ---- the cheapest change that fits ------------------------------------------------------------------------

MICRO_KEYS = (f"{A}.actor.ppo_micro_batch_size_per_gpu", f"{A}.rollout.log_prob_micro_batch_size_per_gpu",
              f"{A}.ref.log_prob_micro_batch_size_per_gpu")


def _fits(config: DictConfig, plan: MemoryPlan, updates: dict, size: ModelSize | None = None,
          source: str | None = None) -> MemoryPlan | None:
    """The plan with these changes, and smaller micro-batches if they need them, when it fits with FIX_MARGIN."""
    micro = max(int(_get(config, key, 1)) for key in MICRO_KEYS)
    while True:
        changed = {**updates, **{key: min(micro, int(_get(config, key, micro))) for key in MICRO_KEYS}}
        found = plan_memory(_Changed(config, changed), size or plan.size, source or plan.size_source, plan.gpu,
                            plan.gpu_source)
        if found.peak <= FIX_MARGIN * plan.gpu:
            found.changes = changed
            return found
        if micro <= 1 or _get(config, f"{A}.actor.use_dynamic_bsz", False):
            return None
        micro //= 2


def _said(plan: MemoryPlan, config: DictConfig) -> str:
    """The overrides of a fix (what differs from the launch's config), and what the plan then comes to."""
    changed = {k: v for k, v in plan.changes.items() if _get(config, k) != v}
    micro = [k for k in changed if k in MICRO_KEYS]
    text = " ".join(f"{k}={v}" for k, v in changed.items())
    if micro:
        text += f" (micro-batches of {changed[micro[0]]}; slower)"
    return f"{text}: ~{plan.peak:.0f} GB"


def cheapest_fix(config: DictConfig, plan: MemoryPlan) -> str | None:
    """The first change, from least to most disruptive to the run, whose plan fits with room for the estimate's
    error (each with smaller micro-batches if it needs them): smaller micro-batches alone (the same training,
    slower), the actor's parameters and Adam offloaded between phases, LoRA, a smaller model, more GPUs. None when
    none does."""
    offload = {f"{A}.actor.fsdp_config.param_offload": True, f"{A}.actor.fsdp_config.optimizer_offload": True}
    lora = {f"{A}.model.lora_rank": 64, f"{A}.model.lora_alpha": 32, f"{A}.model.lora.merge": True,
            f"{A}.actor.optim.lr": 3e-5}
    for label, updates in (("", {}), ("offload: ", offload), ("LoRA as config/profile/lora.yaml: ", lora)):
        if label.startswith("LoRA") and _get(config, "trainer.val_only", False):
            continue
        found = _fits(config, plan, updates)
        if found:
            return label + _said(found, config)
    if table_entry(plan.size.name):
        for hub_id in reversed(qwen25_hub_ids()):
            smaller, source = model_size(hub_id)
            if smaller and smaller.parameters < plan.size.parameters:
                found = _fits(config, plan, {}, smaller, source)
                if found:
                    return f"a smaller model: MODEL_PATH={hub_id} " + _said(found, config)
    per_node = int(_get(config, "trainer.n_gpus_per_node", 1))
    for more in (2, 4, 8):
        found = _fits(config, plan, {"trainer.n_gpus_per_node": per_node * more})
        if found:
            return f"more GPUs: N_GPUS_PER_NODE={per_node * more} (or as many over several nodes) " + \
                _said(found, config)
    return None


def check_memory(config: DictConfig, report, environ=None) -> MemoryPlan | None:
    """A launch whose plan does not fit its GPUs is refused, in one line with the cheapest change that fits; one
    within the estimate's error of not fitting is warned about."""
    plan, _why = plan_for(config, environ)
    if plan is None:
        return None
    if plan.sglang_kv < _one_trajectory_kv(config, plan):
        report.error(f"memory: SGLang's share ({_get(config, f'{A}.rollout.gpu_memory_utilization')} of the "
                     f"~{plan.gpu - 2 * CONTEXT_GIB - plan.params:.0f} GB free when it starts) cannot hold the "
                     f"{plan.size.name} weights ({plan.sglang_weights:.1f} GB) and one trajectory's KV cache; raise "
                     "actor_rollout_ref.rollout.gpu_memory_utilization or use more GPUs (docs/configuration.md#memory)")
        return plan
    if not plan.fits:
        fix = cheapest_fix(config, plan)
        report.error(f"memory: ~{plan.peak:.0f} GB per GPU at its peak ({plan.peak_phase}) does not fit "
                     f"{plan.gpu:.0f} GB ({plan.gpu_source}); " +
                     (f"the cheapest fix: {fix}" if fix else "no single change found that fits: more GPUs with LoRA") +
                     " (docs/configuration.md#memory)")
    elif plan.tight:
        report.warn(f"memory: ~{plan.peak:.0f} of {plan.gpu:.0f} GB per GPU at its peak ({plan.peak_phase}): within "
                    "the estimate's error of not fitting (docs/configuration.md#memory)")
    return plan


def _one_trajectory_kv(config: DictConfig, plan: MemoryPlan) -> float:
    tp = int(_get(config, f"{A}.rollout.tensor_model_parallel_size", 1))
    return plan.sequence * plan.size.kv_bytes_per_token / min(tp, plan.size.kv_heads) / GIB
