"""Find an FSDP actor checkpoint written by verl and build the model-merger command that turns it into a
Hugging Face folder (recipes.export.merge_fsdp: verl's merger, keeping the trained dtype). Every argument is
checked before anything runs."""

from __future__ import annotations

import sys
from pathlib import Path

KEEP = "checkpoint"  # the dtype the weights were trained and saved in
DTYPE_CHOICES = (KEEP, "bfloat16", "float16", "float32")


class ExportError(ValueError):
    pass


def find_actor_dir(checkpoint_root: Path, step: int | None) -> Path:
    """<root>/global_step_<N>/actor, N = the given step or the one in latest_checkpointed_iteration.txt."""
    if not checkpoint_root.is_dir():
        raise ExportError(f"checkpoint folder {checkpoint_root} does not exist (trainer.default_local_dir of the run)")
    if step is None:
        marker = checkpoint_root / "latest_checkpointed_iteration.txt"
        steps = sorted(int(p.name.split("_")[-1]) for p in checkpoint_root.glob("global_step_*")
                       if p.name.split("_")[-1].isdigit())
        if marker.is_file() and marker.read_text().strip().isdigit():
            step = int(marker.read_text().strip())
        elif steps:
            step = steps[-1]
        else:
            raise ExportError(f"no global_step_* folders in {checkpoint_root}: the run saved no checkpoint "
                              "(trainer.save_freq)")
    actor = checkpoint_root / f"global_step_{step}" / "actor"
    if not actor.is_dir():
        raise ExportError(f"{actor} does not exist; available: "
                          f"{sorted(p.name for p in checkpoint_root.glob('global_step_*')) or 'none'}")
    missing = [name for name in ("fsdp_config.json", "huggingface") if not (actor / name).exists()]
    if not list(actor.glob("model_world_size_*_rank_0.pt")):
        missing.append("model_world_size_*_rank_0.pt")
    if missing:
        raise ExportError(f"{actor} is not a complete FSDP actor checkpoint (missing {missing})")
    return actor


def merge_command(actor_dir: Path, target_dir: Path, force: bool, dtype: str = KEEP,
                  python: str = sys.executable) -> list[str]:
    if target_dir.exists() and any(target_dir.iterdir()) and not force:
        raise ExportError(f"target {target_dir} exists and is not empty; choose another --target_dir or pass --force")
    if dtype not in DTYPE_CHOICES:
        raise ExportError(f"--dtype must be one of {DTYPE_CHOICES}, not {dtype!r}")
    return [python, "-m", "recipes.export.merge_fsdp", "--local_dir", str(actor_dir),
            "--target_dir", str(target_dir), "--dtype", dtype]


def is_lora(actor_dir: Path) -> bool:
    return (actor_dir / "lora_train_meta.json").is_file()
