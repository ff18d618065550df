"""The token loop of the CPU rollout server: what SGLang's scheduler does for one request, with a Hugging Face
model and its KV cache instead of SGLang's kernels.

Sampling follows SGLang's parameters (temperature 0 = greedy, top_k -1 = off, top_p). Each token's log-prob
is read from the same distribution it was drawn from (logits / temperature, as verl's actor computes its
log-probs), so verl's rollout-vs-actor log-prob checks see real numbers. `forced` tokens (the steering, see
harness.cpu_backend.steering) are taken instead of sampled ones but scored by the model all the same.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Sampling:
    temperature: float = 1.0
    top_k: int = -1
    top_p: float = 1.0

    @classmethod
    def from_params(cls, params: dict) -> Sampling:
        if float(params.get("repetition_penalty", 1.0)) != 1.0:
            raise NotImplementedError("the CPU rollout server does not implement repetition_penalty != 1.0")
        return cls(temperature=float(params.get("temperature", 1.0)), top_k=int(params.get("top_k", -1)),
                   top_p=float(params.get("top_p", 1.0)))


@dataclass
class Generated:
    token_ids: list[int]
    log_probs: list[float]
    stop_reason: str  # SGLang's finish reasons: "stop" (a stop token) or "length"


def _pick(logits: torch.Tensor, sampling: Sampling, generator: torch.Generator) -> int:
    if sampling.temperature <= 0:
        return int(torch.argmax(logits))
    scores = logits / sampling.temperature
    if 0 < sampling.top_k < scores.numel():
        kth = torch.topk(scores, sampling.top_k).values[-1]
        scores = scores.masked_fill(scores < kth, float("-inf"))
    if sampling.top_p < 1.0:
        sorted_scores, order = torch.sort(scores, descending=True)
        cumulative = torch.softmax(sorted_scores, dim=-1).cumsum(dim=-1)
        drop = cumulative - torch.softmax(sorted_scores, dim=-1) >= sampling.top_p  # keep the first token always
        scores = scores.masked_fill(torch.zeros_like(drop).scatter(0, order, drop), float("-inf"))
    return int(torch.multinomial(torch.softmax(scores, dim=-1), 1, generator=generator))


@torch.inference_mode()
def generate(model, prompt_ids: Sequence[int], max_new_tokens: int, sampling: Sampling, stop_ids: Collection[int],
             generator: torch.Generator, forced: Sequence[int] = ()) -> Generated:
    """Up to max_new_tokens tokens after prompt_ids; a stop token ends the output and is part of it."""
    out = Generated([], [], "length")
    if max_new_tokens <= 0:
        return out
    # logits for the last prompt position only: the whole prompt's would be (prompt x 151936) floats per request
    step = model(input_ids=torch.tensor([list(prompt_ids)]), use_cache=True, logits_to_keep=1)
    while True:
        logits = step.logits[0, -1].float()
        scaled = logits / sampling.temperature if sampling.temperature > 0 else logits
        position = len(out.token_ids)
        token = forced[position] if position < len(forced) else _pick(logits, sampling, generator)
        out.token_ids.append(token)
        out.log_probs.append(float(torch.log_softmax(scaled, dim=-1)[token]))
        if token in stop_ids:
            out.stop_reason = "stop"
            return out
        if len(out.token_ids) >= max_new_tokens:
            return out
        step = model(input_ids=torch.tensor([[token]]), past_key_values=step.past_key_values, use_cache=True)
