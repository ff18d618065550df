"""verl's FSDP model merger (`python -m verl.model_merger merge --backend fsdp`) with two differences:

- the weights keep the dtype they were trained and saved in: verl 0.9.1's merger casts every shard to bf16
  (`_local_tensor.bfloat16()` in fsdp_model_merger.py), so an fp32 run exports weights that differ from the
  trained ones. `--dtype bfloat16` (or float16/float32) casts on purpose; the output says which was written.
- the weight files honour the umask (transformers writes them 0600, unreadable by anyone else).

Everything else is verl's merger: the shard layout, the Hugging Face save, LoRA adapters, the tokenizer.

    python -m recipes.export.merge_fsdp --local_dir <ckpt>/global_step_N/actor --target_dir <hf> [--dtype D]
"""

from __future__ import annotations

import argparse
import json
import os
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

    def _load_and_merge_state_dicts(self, world_size: int, total_shards: int, mesh_shape: tuple[int, ...],
                                    mesh_dim_names: tuple[str, ...]) -> dict[str, torch.Tensor]:
        """Each parameter joined from its rank files as they are, cast only when asked."""
        if len(mesh_shape) != 1:
            raise NotImplementedError("FSDP + TP checkpoints cannot be merged (verl's merger cannot either)")
        folder = Path(self.config.local_dir)
        ranks = [torch.load(folder / f"model_world_size_{world_size}_rank_{rank}.pt", map_location="cpu",
                            weights_only=False) for rank in range(total_shards)]
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
    merger.merge_and_save()
    merger.cleanup()
    how = "the checkpoint's dtype" if args.dtype == KEEP else f"cast by --dtype {args.dtype}"
    saved = str(merger.saved_dtype).removeprefix("torch.")
    print(f"[export] weights written as {saved} ({how}; --dtype bfloat16 halves an fp32 export) -> {args.target_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
