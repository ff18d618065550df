"""Export a verl FSDP checkpoint to a Hugging Face model folder (wraps `python -m verl.model_merger merge`).

    python scripts/export_checkpoint.py outputs/<exp>/checkpoints --target_dir outputs/<exp>/hf [--step N]
        [--dtype checkpoint|bfloat16|float16|float32] [--force] [--dry_run]

Picks the latest saved step (latest_checkpointed_iteration.txt) unless --step is given, checks the actor
checkpoint is complete and the target is free, prints the merger command, then runs it: verl's FSDP merger,
except that the weights keep the dtype they were trained in (verl's own casts them to bf16) unless --dtype says
otherwise, and are readable as the umask allows. LoRA runs: verl's merger reads lora_train_meta.json in the same
folder and handles the adapters itself.
"""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
from pathlib import Path

from recipes.evaluation.export import DTYPE_CHOICES, KEEP, ExportError, find_actor_dir, is_lora, merge_command


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("checkpoint_root", help="trainer.default_local_dir of the training run")
    p.add_argument("--target_dir", required=True)
    p.add_argument("--step", type=int, default=None)
    p.add_argument("--dtype", default=KEEP, choices=DTYPE_CHOICES,
                   help=f"{KEEP} (default): the weights as trained and saved; else cast them (bfloat16 halves an fp32 "
                   "export, as verl's own merger does)")
    p.add_argument("--force", action="store_true", help="write into a non-empty target folder")
    p.add_argument("--dry_run", action="store_true", help="check and print the command only")
    args = p.parse_args(argv)
    try:
        actor = find_actor_dir(Path(args.checkpoint_root).expanduser(), args.step)
        command = merge_command(actor, Path(args.target_dir).expanduser(), args.force, args.dtype)
    except ExportError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(f"[export] {'LoRA ' if is_lora(actor) else ''}checkpoint {actor}")
    print("[export] " + " ".join(shlex.quote(c) for c in command))
    if args.dry_run:
        return 0
    return subprocess.call(command)


if __name__ == "__main__":
    sys.exit(main())
