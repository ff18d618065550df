"""verl's FSDP model merger (`python -m verl.model_merger merge --backend fsdp`) with two differences:

- the weights keep the dtype they were trained and saved in: verl 0.9.1's merger casts every shard to bf16
  (`_local_tensor.bfloat16()` in fsdp_model_merger.py), so an fp32 run exports weights that differ from the
  trained ones. `--dtype bfloat16` (or float16/float32) casts on purpose; the output says which was written.
- the weight files honour the umask (transformers writes them 0600, unreadable by anyone else).
- the shards are loaded as data (`torch.load(weights_only=True)`, what verl's merger loads with
  `weights_only=False`): a checkpoint from elsewhere cannot run code on export. What FSDP shards hold besides
  tensors (DTensors, their device mesh and placements) is allow-listed, as torch 2.13 does when
  `torch.distributed.tensor` is imported; anything else refuses the file in one line.

Everything else is verl's merger: the shard layout, the Hugging Face save, LoRA adapters, the tokenizer.

    python -m recipes.export.merge_fsdp --local_dir <ckpt>/global_step_N/actor --target_dir <hf> [--dtype D]
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import pickle
import re
import sys
from collections import Counter
from pathlib import Path

import torch
from torch.distributed.tensor import DTensor
from verl.model_merger.base_model_merger import ModelMergerConfig
from verl.model_merger.fsdp_model_merger import FSDPModelMerger, merge_non_dtensor_shards

from recipes.export.export import DTYPE_CHOICES, KEEP

DTYPES = {name: getattr(torch, name) for name in DTYPE_CHOICES if name != KEEP}
WEIGHT_PATTERNS = ("*.safetensors", "*.safetensors.index.json", "*.bin", "*.bin.index.json")


# What verl's FSDP shards hold besides plain tensors: DTensors, their spec, device mesh and placements
# (module, name); a name this torch does not have is skipped (the layouts are torch 2.13's).
SHARD_GLOBALS = (
    ("torch.distributed.tensor", "DTensor"), ("torch.distributed.device_mesh", "DeviceMesh"),
    ("torch.distributed.tensor._dtensor_spec", "DTensorSpec"), ("torch.distributed.tensor._dtensor_spec", "TensorMeta"),
    ("torch.distributed.tensor._dtensor_spec", "ShardOrderEntry"),
    ("torch.distributed.tensor.placement_types", "Shard"), ("torch.distributed.tensor.placement_types", "Replicate"),
    ("torch.distributed.tensor.placement_types", "Partial"),
    ("torch.distributed.tensor.placement_types", "_StridedShard"),
    ("torch.distributed._mesh_layout", "_MeshLayout"), ("torch.distributed._mesh_layout", "_FlatLayout"),
)


class CheckpointRefused(RuntimeError):
    """A shard that holds more than tensors and their layout; the message is the one line the user sees."""


def shard_globals() -> list:
    found = []
    for module, name in SHARD_GLOBALS:
        try:
            found.append(getattr(importlib.import_module(module), name))
        except (ImportError, AttributeError):
            continue
    return found


def load_shard(path: Path) -> dict:
    """One rank's shard, loaded as data: tensors, DTensors and their layout, nothing that runs code."""
    try:
        with torch.serialization.safe_globals(shard_globals()):
            return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:
        named = re.search(r"GLOBAL ([\w.]+)", str(err))
        why = f"it names {named.group(1)}" if named else (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise CheckpointRefused(f"{path} holds more than weights, so it was not loaded ({why}); a checkpoint "
                                "verl saved holds only tensors and their layout: export only checkpoints from a "
                                "source you trust") from None


class DtypeKeepingFSDPMerger(FSDPModelMerger):
    def __init__(self, config: ModelMergerConfig, dtype: str = KEEP) -> None:
        if dtype != KEEP and dtype not in DTYPES:
            raise ValueError(f"dtype must be {KEEP} or one of {sorted(DTYPES)}, not {dtype!r}")
        super().__init__(config)
        self.cast_to = DTYPES.get(dtype)
        self.saved_dtype: torch.dtype | None = None

    def _cast(self, tensor: torch.Tensor) -> torch.Tensor:
        if self.cast_to is None or not tensor.is_floating_point():
            return tensor
        return tensor.to(self.cast_to)

    def _load_rank_zero_state_dict(self, world_size: int) -> dict:
        return load_shard(Path(self.config.local_dir) / f"model_world_size_{world_size}_rank_0.pt")

    def _load_and_merge_state_dicts(self, world_size: int, total_shards: int, mesh_shape: tuple[int, ...],
                                    mesh_dim_names: tuple[str, ...]) -> dict[str, torch.Tensor]:
        """Each parameter joined from its rank files as they are, cast only when asked."""
        if len(mesh_shape) != 1:
            raise NotImplementedError("FSDP + TP checkpoints cannot be merged (verl's merger cannot either)")
        folder = Path(self.config.local_dir)
        ranks = [load_shard(folder / f"model_world_size_{world_size}_rank_{rank}.pt") for rank in range(total_shards)]
        merged = {}
        for key in list(ranks[0]):
            pieces = [rank.pop(key) for rank in ranks]
            if isinstance(pieces[0], DTensor):
                placements = tuple(pieces[0].placements)
                if mesh_dim_names[0] in ("dp", "ddp"):  # replicated over the data-parallel dimension
                    placements = placements[1:]
                merged[key] = self._merge_by_placement([self._cast(p._local_tensor) for p in pieces], placements[0])
            else:  # buffers and unsharded parameters: the same full tensor on every rank
                merged[key] = merge_non_dtensor_shards(key, [self._cast(p) for p in pieces])
        floats = Counter(t.dtype for t in merged.values() if t.is_floating_point())
        self.saved_dtype = floats.most_common(1)[0][0] if floats else None
        return merged

    def save_hf_model_and_tokenizer(self, state_dict: dict[str, torch.Tensor]) -> None:
        super().save_hf_model_and_tokenizer(state_dict)
        target = Path(self.config.target_dir)
        if self.saved_dtype is not None:
            _set_config_dtype(target / "config.json", self.saved_dtype)
        honour_umask(target)


def _set_config_dtype(config_path: Path, dtype: torch.dtype) -> None:
    """verl builds the saved model in bf16, so its config.json says bfloat16 whatever the weights are; loaders
    (dtype="auto", SGLang) read it. Rewritten atomically."""
    config = json.loads(config_path.read_text())
    name = str(dtype).removeprefix("torch.")
    for key in ("dtype", "torch_dtype"):
        if key in config or key == "dtype":
            config[key] = name
    tmp = config_path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(config, indent=2) + "\n")
    os.replace(tmp, config_path)


def honour_umask(folder: Path) -> None:
    """transformers writes the weights through a private temporary file (mode 0600): give them the mode any file
    the user writes gets (0666 minus the umask, 0644 typically)."""
    umask = os.umask(0)
    os.umask(umask)
    for pattern in WEIGHT_PATTERNS:
        for path in folder.glob(pattern):
            path.chmod(0o666 & ~umask)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--local_dir", required=True, help="<checkpoint>/global_step_N/actor")
    p.add_argument("--target_dir", required=True)
    p.add_argument("--dtype", default=KEEP, choices=DTYPE_CHOICES,
                   help=f"{KEEP} (default): as trained and saved; else cast the weights (bfloat16: verl's default)")
    args = p.parse_args(argv)
    config = ModelMergerConfig(operation="merge", backend="fsdp", local_dir=args.local_dir,
                               target_dir=args.target_dir,
                               hf_model_config_path=os.path.join(args.local_dir, "huggingface"))
    merger = DtypeKeepingFSDPMerger(config, args.dtype)
    try:
        merger.merge_and_save()
    except CheckpointRefused as err:
        print(f"[export] error: {err}", file=sys.stderr)
        return 1
    merger.cleanup()
    how = "the checkpoint's dtype" if args.dtype == KEEP else f"cast by --dtype {args.dtype}"
    saved = str(merger.saved_dtype).removeprefix("torch.")
    print(f"[export] weights written as {saved} ({how}; --dtype bfloat16 halves an fp32 export) -> {args.target_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
