"""Can SGLang 0.5.12 and FlashInfer 0.6.11 serve the launch's model as verl starts them (flashinfer attention, bf16)?
Read from the model folder (config.json and the tokenizer) before anything starts: a model they cannot serve fails
minutes into a launch, in SGLang's first CUDA-graph capture, and a tokenizer that breaks the hermes tool tags into
pieces makes every call several tokens the model must get right. A hub id is not read (nothing is fetched here).

- head_dim (config.json's `head_dim`, else hidden_size / num_attention_heads): FlashInfer dispatches 64, 128, 256
  and 512 only (flashinfer/data/include/flashinfer/utils.cuh, DISPATCH_HEAD_DIM: "Unsupported head_dim").
- GQA group (heads / KV heads): a whole number; from 4 up SGLang decodes through FlashInfer's tensor-core (fa2
  prefill) module (sglang/srt/layers/attention/flashinfer_backend.py, should_use_tensor_core), below it through the
  plain decode module, which dispatches groups 1, 2, 3 and 4 (utils.cuh, DISPATCH_GQA_GROUP_SIZE) and which the
  first-use kernel census (recipes/gpu_env/kernel_census.py) does not count: a note, it compiles at first use.
- vocabulary: the embedding holds every token id of the tokenizer.
- context: max_position_embeddings covers data.max_prompt_length + data.max_response_length (verl gives SGLang
  that as its context length and refuses a longer one).
- tokenizer: it loads from the folder (verl loads it there in every worker), has a chat template and an eos token;
  when the run offers tools, `<tool_call>` and `</tool_call>` are one token each (as in Qwen2.5's vocabulary).
"""

from __future__ import annotations

import json
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from recipes.gpu_env.kernel_census import shape_of
from recipes.models import ModelSource, resolve_model
from recipes.preflight.findings import Report
from recipes.preflight.model_tokenizer import load_tokenizer

FLASHINFER_HEAD_DIMS = (64, 128, 256, 512)
TENSOR_CORE_GROUP = 4  # SGLang decodes with FlashInfer's tensor-core module from this GQA group up
HERMES_TAGS = ("<tool_call>", "</tool_call>")


def model_problems(folder: Path, offers_tools: bool, context_needed: int) -> tuple[list[str], list[str]]:
    """(errors, notes) for one local model folder, one line each; nothing when its config.json names no attention
    shape (not a causal LM's config: verl will say more)."""
    config = json.loads((folder / "config.json").read_text())
    shape = shape_of(str(folder), config)
    if shape is None or "num_attention_heads" not in config:
        return [], []
    errors, notes = [], []
    where = f"actor_rollout_ref.model.path: {folder}"
    if shape.head_dim not in FLASHINFER_HEAD_DIMS:
        given = "config.json's head_dim" if config.get("head_dim") else (
            f"hidden_size {config['hidden_size']} / {shape.heads} heads")
        errors.append(f"{where} has head_dim {shape.head_dim} ({given}): SGLang's FlashInfer attention serves head_dim "
                      f"{', '.join(map(str, FLASHINFER_HEAD_DIMS))} only; give the model one of those (config.json's "
                      "head_dim may differ from hidden_size / heads)")
    if shape.heads % shape.kv_heads:
        errors.append(f"{where} has {shape.heads} attention heads and {shape.kv_heads} KV heads: the heads must be a "
                      "whole multiple of the KV heads")
    elif shape.gqa_group < TENSOR_CORE_GROUP:
        notes.append(f"model: GQA group {shape.gqa_group} (< {TENSOR_CORE_GROUP}): SGLang decodes through FlashInfer's "
                     "plain decode module, which the first-use kernel census does not count (compiled at first use)")
    positions = int(config.get("max_position_embeddings") or 0)
    if positions and positions < context_needed:
        errors.append(f"{where} has max_position_embeddings {positions}, less than data.max_prompt_length + "
                      f"data.max_response_length = {context_needed}: SGLang's context would cut trajectories; lower "
                      "the lengths or use a model with a longer context")
    tokenizer, why = load_tokenizer(folder)
    if tokenizer is None:
        errors.append(f"{where}: its tokenizer does not load ({why}); verl loads it from the model folder")
        return errors, notes
    vocab = int(config.get("vocab_size") or 0)
    if vocab and vocab < len(tokenizer):
        errors.append(f"{where} has vocab_size {vocab} but its tokenizer has {len(tokenizer)} tokens: ids past the "
                      "embedding would crash SGLang; save the model with a vocabulary at least as large")
    if not tokenizer.chat_template:
        errors.append(f"{where}: its tokenizer has no chat template (the agent loop renders every prompt with one)")
    if tokenizer.eos_token_id is None:
        errors.append(f"{where}: its tokenizer has no eos token (generation would run to the length limit)")
    if offers_tools:
        split = [tag for tag in HERMES_TAGS if len(tokenizer.encode(tag, add_special_tokens=False)) != 1]
        if split:
            errors.append(f"{where}: its tokenizer splits {' and '.join(split)} into several tokens; add the hermes "
                          "tool tags as tokens of their own (Qwen2.5's are), or a call is several tokens to get right")
    if not errors:
        notes.append(f"model: head_dim {shape.head_dim}, {shape.heads} heads / {shape.kv_heads} KV heads, vocab "
                     f"{vocab or '?'} >= {len(tokenizer)} tokens, context {positions or '?'}: SGLang and FlashInfer "
                     "serve it" + (", tool tags one token each" if offers_tools else ""))
    return errors, notes


def check_sglang_model(config: DictConfig, report: Report, model: ModelSource | None = None) -> None:
    """The checks above, for a launch whose rollout is SGLang and whose model is a folder here (`model`: where the
    preflight found it; else looked up from the config)."""
    if config.actor_rollout_ref.rollout.name != "sglang":
        return
    model = model or resolve_model(str(config.actor_rollout_ref.model.path))
    folder = model.folder
    if not model.local or not (folder / "config.json").is_file():
        return  # a hub id, or a folder check_model already refused
    offers_tools = bool(OmegaConf.select(config, "actor_rollout_ref.rollout.multi_turn.tool_config_path"))
    context = int(config.data.max_prompt_length) + int(config.data.max_response_length)
    errors, notes = model_problems(folder, offers_tools, context)
    for error in errors:
        report.error(error)
    for note in notes:
        report.note(note)
