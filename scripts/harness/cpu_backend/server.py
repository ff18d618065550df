"""Stand-in for verl's SGLang rollout server actor (`SGLangHttpServer` in
verl/workers/rollout/sglang_rollout/async_sglang_server.py): one Ray actor per rollout replica that verl's agent
loop calls token-in, token-out, here generating with the Hugging Face model on the CPU.

What it keeps of SGLang's contract with verl:
- `generate(prompt_ids, sampling_params, request_id, ...) -> TokenOutput` with the response token ids, their
  log-probs when `sampling_params["logprobs"]`, a finish reason and `extra_fields["global_steps"]` (the weights
  version); SGLang's length rule (an explicit max_new_tokens/max_tokens, else
  min(response_length, prompt_length + response_length - len(prompt_ids)));
  stops at the model's EOS tokens and at `stop_token_ids` (what verl's tool parsers add), the stop token included,
  unless `ignore_eos` (then only the length ends a turn); the server argument `preferred_sampling_params`
  (`engine_kwargs.hf_cpu`, JSON as SGLang takes it) gives every request defaults its own parameters override.
- weights arrive from the trainer (harness.cpu_backend.rollout.CpuRolloutAdapter) after every actor update; each
  load records the weights version and a checksum (`record`), the smoke test's evidence that training changed
  the weights and that a resumed run starts from the saved ones.
- sleep/wake_up, KV-cache release/resume, abort/resume, profiling: no-ops (no accelerator memory to free).

The one departure, the steering of some first turns into a tool call, is harness.cpu_backend.steering.
Generation runs in a thread, one request at a time per replica, so control calls stay answered meanwhile.

Sampling is reproducible for a seed: each request draws from its own generator, seeded from the rollout seed, the
replica, the weights version, the prompt's tokens and how many requests of that version sent the same prompt
before it. With one generator shared by all requests, the draws went to whichever request reached the model first,
and concurrent multi-turn rollouts (a tool's answer arriving a little sooner or later) reach it in a different
order each run: the same checkpoint, rollout seed and rows scored 0.434 and 0.441 in two evaluations.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
from typing import Any

import torch

from harness.cpu_backend import ROLLOUT_NAME
from harness.cpu_backend.generation import Sampling, generate
from harness.cpu_backend.steering import forced_tool_call, is_first_turn, prompt_key

# Each event is printed and, when this variable names a file, appended to it as one JSON line: the smoke
# test's evidence (Ray's forwarding of actor prints to the driver log is best-effort).
EVENTS_ENV = "CPU_ROLLOUT_EVENTS"


def record(event: str, **fields) -> None:
    """e.g. {"event": "weights", "replica": 0, "version": 2, "params": 9798208, "sum": 283.61, "sha256": "..."}"""
    line = json.dumps({"event": event, **fields})
    print(f"[cpu-rollout] {line}", flush=True)
    path = os.environ.get(EVENTS_ENV)
    if path:
        with open(path, "a") as f:  # one short write per line: appends from several servers do not interleave
            f.write(line + "\n")


def loaded_weights(events: list[dict]) -> dict[int, set[tuple[str, float]]]:
    """What a record of `record` lines says was loaded: weights version -> {(sha256, sum)} over every load of it (every
    replica, every launch that appended to the record)."""
    out: dict[int, set[tuple[str, float]]] = {}
    for e in events:
        if e["event"] == "weights":
            out.setdefault(e["version"], set()).add((e["sha256"], e["sum"]))
    return out


def weights_checksum(model: torch.nn.Module) -> tuple[int, float, str]:
    """(parameter count, float64 sum, sha256 of the bytes) over the model's parameters in name order."""
    digest, total, count = hashlib.sha256(), 0.0, 0
    for name, param in sorted(model.named_parameters()):
        data = param.detach().to(torch.float32).contiguous()
        digest.update(name.encode())
        digest.update(data.numpy().tobytes())
        total += float(data.double().sum())
        count += data.numel()
    return count, total, digest.hexdigest()[:16]


class CpuRolloutServer:
    def __init__(self, config, model_config, replica_rank: int, steering=None) -> None:
        from transformers import AutoModelForCausalLM
        from verl.utils.config import omega_conf_to_dataclass
        from verl.workers.config import HFModelConfig

        torch.set_num_threads(1)  # the trainer ranks need the cores more; one request at a time anyway
        self.config = omega_conf_to_dataclass(config)
        self.model_config = omega_conf_to_dataclass(model_config, dataclass_type=HFModelConfig)
        self.replica_rank = replica_rank
        self.steering = steering
        self.global_steps = None
        hf_config = self.model_config.hf_config
        if self.config.load_format == "dummy":  # as SGLang: random weights until the first sync from the trainer
            self.model = AutoModelForCausalLM.from_config(hf_config, torch_dtype=torch.float32)
        else:
            self.model = AutoModelForCausalLM.from_pretrained(self.model_config.local_path, torch_dtype=torch.float32)
        self.model.eval()
        self.tokenizer = self.model_config.tokenizer
        self.eos_ids = _eos_ids(self.model_config, self.tokenizer)
        self.preferred = _preferred_params((self.config.engine_kwargs or {}).get(ROLLOUT_NAME) or {})
        self._requests_seen: dict[tuple, int] = {}  # (weights version, prompt digest) -> requests so far
        self._lock = asyncio.Lock()

    # ---- generation ---------------------------------------------------------------------------------------
    async def generate(self, prompt_ids, sampling_params: dict[str, Any], request_id: str, image_data=None,
                       video_data=None, **kwargs):
        from verl.workers.rollout.replica import TokenOutput

        if image_data or video_data or kwargs.get("audio_data"):
            raise NotImplementedError("the CPU rollout server is text-only")
        params = {**self.preferred, **sampling_params}  # SGLang's tokenizer manager merges them so
        prompt_ids = list(prompt_ids)
        max_new_tokens = self._max_new_tokens(params, len(prompt_ids))
        # SGLang's ignore_eos skips every token-based finish: EOS and the request's stop tokens alike
        stop_ids = set() if params.get("ignore_eos") else set(self.eos_ids) | set(params.get("stop_token_ids") or [])
        generator = self._generator_for(prompt_ids)  # on arrival, before any await: the count is this request's
        forced = await self._steer(prompt_ids)
        async with self._lock:
            out = await asyncio.to_thread(generate, self.model, prompt_ids, max_new_tokens,
                                          Sampling.from_params(params), stop_ids, generator, forced)
        return TokenOutput(token_ids=out.token_ids, log_probs=out.log_probs if params.get("logprobs") else None,
                           stop_reason=out.stop_reason, extra_fields={"global_steps": self.global_steps})

    def _generator_for(self, prompt_ids: list[int]) -> torch.Generator:
        """This request's own generator (see the module's docstring). Requests with the same prompt and weights
        are interchangeable, so which of them gets which count does not change what a step samples."""
        digest = hashlib.sha256(json.dumps([int(t) for t in prompt_ids]).encode()).hexdigest()
        key = (self.global_steps, digest)
        index = self._requests_seen.get(key, 0)
        self._requests_seen[key] = index + 1
        seed = hashlib.sha256(f"{self.config.seed}/{self.replica_rank}/{self.global_steps}/{digest}/{index}".encode())
        return torch.Generator().manual_seed(int.from_bytes(seed.digest()[:8], "little") >> 1)

    def _new_version(self, global_steps) -> None:
        """The weights version changed: counts of earlier versions are never needed again."""
        self.global_steps = global_steps
        self._requests_seen = {k: v for k, v in self._requests_seen.items() if k[0] == global_steps}

    def _max_new_tokens(self, params: dict, prompt_len: int) -> int:
        for key in ("max_new_tokens", "max_tokens"):
            if key in params:
                return max(0, int(params[key]))
        return max(0, min(self.config.response_length,
                          self.config.prompt_length + self.config.response_length - prompt_len))

    async def _steer(self, prompt_ids: list[int]) -> list[int]:
        if self.steering is None:
            return []
        text = self.tokenizer.decode(prompt_ids)
        call = forced_tool_call(text) if is_first_turn(text) else None
        if call is None or not await self.steering.claim.remote(prompt_key(prompt_ids), self.global_steps):
            return []
        record("steered_tool_call", replica=self.replica_rank, version=self.global_steps, call=call)
        end = self.tokenizer.eos_token_id if self.tokenizer.eos_token_id is not None else self.eos_ids[0]
        return self.tokenizer.encode(call, add_special_tokens=False) + [end]  # the turn ends as the model's would

    # ---- weights ------------------------------------------------------------------------------------------
    async def load_weights(self, state_dict: dict[str, torch.Tensor], global_steps=None) -> None:
        async with self._lock:  # never swap weights under a running request
            missing, unexpected = self.model.load_state_dict(state_dict, strict=False)
            tied = {"lm_head.weight"} if self.model.config.tie_word_embeddings else set()
            if unexpected or set(missing) - tied:
                raise RuntimeError(f"weights from the trainer do not fit the rollout model: missing "
                                   f"{sorted(set(missing) - tied)}, unexpected {sorted(unexpected)}")
            if tied:
                self.model.tie_weights()
            self._new_version(global_steps)
            count, total, digest = weights_checksum(self.model)
        record("weights", replica=self.replica_rank, version=global_steps, params=count, sum=total, sha256=digest)

    async def set_global_steps(self, global_steps: int) -> None:
        self._new_version(global_steps)

    # ---- what verl calls around generation: nothing to do without accelerator memory ---------------------------
    async def wake_up(self) -> None: ...
    async def sleep(self) -> None: ...
    async def clear_kv_cache(self) -> None: ...
    async def release_kv_cache(self) -> None: ...
    async def resume_kv_cache(self) -> None: ...
    async def abort_all_requests(self, reject_request: bool = False) -> None: ...
    async def resume_generation(self) -> None: ...
    async def start_profile(self, **kwargs) -> None: ...
    async def stop_profile(self) -> None: ...

    def get_server_address(self) -> str:
        return f"cpu-rollout-replica-{self.replica_rank}"  # no HTTP server: a unique key for verl's load balancer


def _preferred_params(engine_kwargs: dict) -> dict:
    """SGLang's `preferred_sampling_params` server argument: a JSON object (or a mapping) of request defaults."""
    value = engine_kwargs.get("preferred_sampling_params")
    if value is None:
        return {}
    try:
        params = json.loads(value) if isinstance(value, str) else dict(value)
    except (ValueError, TypeError) as err:
        raise ValueError(f"engine_kwargs.{ROLLOUT_NAME}.preferred_sampling_params must be a JSON object as SGLang "
                         f"takes it, not {value!r} ({err})") from None
    if not isinstance(params, dict):
        raise ValueError(f"engine_kwargs.{ROLLOUT_NAME}.preferred_sampling_params must be a JSON object, not {value!r}")
    return params


def _eos_ids(model_config, tokenizer) -> list[int]:
    """The model's EOS tokens, as SGLang reads them: generation_config first, then the tokenizer's."""
    ids = []
    for source in (getattr(model_config.generation_config, "eos_token_id", None), tokenizer.eos_token_id):
        for token in source if isinstance(source, list) else [source]:
            if token is not None and token not in ids:
                ids.append(int(token))
    if not ids:
        raise ValueError(f"{model_config.local_path}: no EOS token in generation_config or tokenizer")
    return ids
