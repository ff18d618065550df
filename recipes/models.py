"""What the recipe knows of a model's size before anything loads it: its config.json, read from a local folder or
the Hugging Face cache, else the Qwen2.5 sizes below (the recipe's models) when nothing of the model is here.

The table is the one home of those sizes: the memory plan (recipes/preflight/memory.py) counts parameters, KV cache
and logits from it, and the first-use kernel census (recipes/gpu_env/kernel_census.py) takes its attention shapes
from it. Nothing here imports torch or transformers; huggingface_hub only when a cache is looked at.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

# Qwen2.5 -Instruct and base models of each size share these config.json values (the hub's config.json files).
QWEN25_CONFIGS = {
    "Qwen2.5-0.5B": dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
                         num_key_value_heads=2, vocab_size=151936, tie_word_embeddings=True,
                         max_position_embeddings=32768),
    "Qwen2.5-1.5B": dict(hidden_size=1536, intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12,
                         num_key_value_heads=2, vocab_size=151936, tie_word_embeddings=True,
                         max_position_embeddings=32768),
    "Qwen2.5-3B": dict(hidden_size=2048, intermediate_size=11008, num_hidden_layers=36, num_attention_heads=16,
                       num_key_value_heads=2, vocab_size=151936, tie_word_embeddings=True,
                       max_position_embeddings=32768),
    "Qwen2.5-7B": dict(hidden_size=3584, intermediate_size=18944, num_hidden_layers=28, num_attention_heads=28,
                       num_key_value_heads=4, vocab_size=152064, tie_word_embeddings=False,
                       max_position_embeddings=32768),
}
QWEN25_HUB_ORG = "Qwen"
BF16_BYTES = 2


@dataclass(frozen=True)
class ModelSize:
    """A decoder-only transformer as its config.json describes it (Qwen2/Llama-like: q/k/v with biases, a gated
    MLP, RMSNorms)."""

    name: str
    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    tied: bool  # one embedding matrix for input and output

    @classmethod
    def from_config(cls, name: str, config: dict) -> ModelSize | None:
        """None when the config names no such shape (not a causal LM's config.json)."""
        needed = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "vocab_size")
        if not all(config.get(key) for key in needed):
            return None
        heads = int(config["num_attention_heads"])
        return cls(name=name, hidden=int(config["hidden_size"]), intermediate=int(config["intermediate_size"]),
                   layers=int(config["num_hidden_layers"]), heads=heads,
                   kv_heads=int(config.get("num_key_value_heads") or heads),
                   head_dim=int(config.get("head_dim") or int(config["hidden_size"]) // heads),
                   vocab=int(config["vocab_size"]), tied=bool(config.get("tie_word_embeddings", False)))

    @property
    def layer_parameters(self) -> int:
        h, q, kv = self.hidden, self.heads * self.head_dim, self.kv_heads * self.head_dim
        attention = h * q + q + 2 * (h * kv + kv) + q * h  # q, k, v with biases; o without
        return attention + 3 * h * self.intermediate + 2 * h  # gate, up, down; two norms

    @property
    def embedding_parameters(self) -> int:
        return self.vocab * self.hidden

    @property
    def parameters(self) -> int:
        output = 0 if self.tied else self.embedding_parameters
        return self.embedding_parameters + output + self.layers * self.layer_parameters + self.hidden

    def lora_parameters(self, rank: int) -> int:
        """Adapters of `rank` on every linear layer of every block (verl's target_modules all-linear)."""
        h, i, q, kv = self.hidden, self.intermediate, self.heads * self.head_dim, self.kv_heads * self.head_dim
        in_out = (h + q) + 2 * (h + kv) + (q + h) + 2 * (h + i) + (i + h)
        return self.layers * rank * in_out

    @property
    def kv_bytes_per_token(self) -> int:
        """One token's K and V in every layer, bf16, whole model (an engine of TP t holds 1/t of it per GPU)."""
        return self.layers * 2 * self.kv_heads * self.head_dim * BF16_BYTES


def looks_like_a_local_path(model: str) -> bool:
    """A hub id is `name` or `namespace/name`; anything else with a slash, or starting with /, ~ or ., is a folder."""
    return model.startswith(("/", "~", ".")) or model.count("/") > 1


def table_entry(model: str) -> tuple[str, dict] | None:
    """(size name, config values) for a Qwen2.5 model named by hub id or folder name (Qwen/Qwen2.5-3B-Instruct)."""
    base = model.rstrip("/").rsplit("/", 1)[-1].lower()
    for name, values in QWEN25_CONFIGS.items():
        if base == name.lower() or base.startswith(name.lower() + "-"):
            return name, values
    return None


def qwen25_hub_ids() -> list[str]:
    """The -Instruct models of the table, smallest first, as hub ids."""
    return [f"{QWEN25_HUB_ORG}/{name}-Instruct" for name in QWEN25_CONFIGS]


def known_hub_ids() -> set[str]:
    """The hub ids the recipe knows the size of, spelled as the hub does: the table's -Instruct and base models."""
    return {*qwen25_hub_ids(), *(f"{QWEN25_HUB_ORG}/{name}" for name in QWEN25_CONFIGS)}


# ---- where a model's config.json is -------------------------------------------------------------------------

def hub_cache_dir() -> Path:
    """The Hugging Face hub cache as huggingface_hub finds it (HF_HUB_CACHE, else HF_HOME/hub, else
    ~/.cache/huggingface/hub; `~` and `$VAR` expanded as it does), read now rather than when huggingface_hub was
    imported: the one answer every check gets (resolve_model)."""
    explicit = os.environ.get("HF_HUB_CACHE") or os.environ.get("HUGGINGFACE_HUB_CACHE")
    if explicit:
        return Path(os.path.expandvars(os.path.expanduser(explicit)))
    home = os.environ.get("HF_HOME") or os.path.join(os.environ.get("XDG_CACHE_HOME") or "~/.cache", "huggingface")
    return Path(os.path.expandvars(os.path.expanduser(home))) / "hub"


def cached_file(repo_id: str, filename: str = "config.json", cache: Path | None = None) -> Path | None:
    """A file of a hub model in the local cache (`cache`, else hub_cache_dir(); its main revision), or None."""
    try:
        from huggingface_hub import try_to_load_from_cache

        found = try_to_load_from_cache(repo_id, filename, cache_dir=str(cache or hub_cache_dir()))
    except Exception:  # not a valid repo id, or an unreadable cache: not cached
        return None
    return Path(found) if isinstance(found, str) else None


def cached_model_ids() -> list[str]:
    """Every model in the local hub cache, as a hub id (models--<org>--<name> folders)."""
    root = hub_cache_dir()
    if not root.is_dir():
        return []
    return sorted(p.name[len("models--"):].replace("--", "/", 1) for p in root.glob("models--*") if p.is_dir())


@dataclass(frozen=True)
class ModelSource:
    """Where a launch's model is, worked out once (resolve_model) and read by every check that needs it: a folder
    here, a hub id the local hub cache holds, or a hub id that is not here yet."""

    name: str  # as the config names it (actor_rollout_ref.model.path)
    local: bool  # named as a folder (it may not exist: checks.check_model says so)
    folder: Path | None  # where its config.json is: the folder, or the cache's snapshot of a hub id; None: not here
    cache: Path  # the hub cache a hub id was looked up in (hub_cache_dir())

    @property
    def where(self) -> str:
        """Where its config.json was read, in words."""
        return f"{self.folder}/config.json" if self.local else "config.json in the HF cache"

    def config(self) -> dict | None:
        """Its config.json, or None when it is not here or does not read as JSON."""
        path = self.folder / "config.json" if self.folder else None
        try:
            return json.loads(path.read_text()) if path and path.is_file() else None
        except (OSError, ValueError):
            return None

    def size(self) -> tuple[ModelSize | None, str]:
        """The model's size and where it was read: its config.json here, else the recipe's Qwen2.5 table."""
        config = self.config()
        size = ModelSize.from_config(self.name, config) if isinstance(config, dict) else None
        if size is not None:
            return size, self.where
        entry = table_entry(self.name)
        if entry:
            return ModelSize.from_config(entry[0], entry[1]), f"the recipe's {entry[0]} table (nothing of it here)"
        return None, "no config.json here and not a Qwen2.5 size the recipe knows"


def resolve_model(model: str) -> ModelSource:
    """Where `model` (a folder or a hub id) is on this machine; the hub cache is hub_cache_dir()'s, read now."""
    folder = Path(os.path.expanduser(model))
    cache = hub_cache_dir()
    if looks_like_a_local_path(model) or folder.exists():
        return ModelSource(model, True, folder, cache)
    found = cached_file(model, cache=cache)
    return ModelSource(model, False, found.parent if found else None, cache)


def model_size(model: str) -> tuple[ModelSize | None, str]:
    """The size of a model named by folder or hub id, and where it was read (resolve_model(model).size())."""
    return resolve_model(model).size()
