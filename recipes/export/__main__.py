"""Export a verl FSDP checkpoint to a Hugging Face model folder, and record beside it where it came from.

    gsm8k-export-checkpoint outputs/<exp>/checkpoints --target_dir outputs/<exp>/hf [--step N]
        [--dtype checkpoint|bfloat16|float16|float32] [--force] [--dry_run]

Picks the latest saved step (latest_checkpointed_iteration.txt) unless --step is given, checks the actor
checkpoint is complete and the target is free, prints the merge command, then runs it:
`python -m recipes.export.merge_fsdp`, which is verl's FSDP model merger except that the weights keep the dtype
they were trained in (verl's own casts them to bf16) unless --dtype says otherwise, and are readable as the umask
allows. LoRA runs: verl's merger reads lora_train_meta.json in the same folder and handles the adapters itself.
Then exported_from.json in the target names the experiment and step (recipes/export/provenance.py), which
scripts/eval_gsm8k.sh uses to name the evaluation: evaluations of different checkpoints never share a name.
"""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
from pathlib import Path

from recipes.export.export import DTYPE_CHOICES, KEEP, ExportError, find_actor_dir, is_lora, merge_command
from recipes.export.provenance import EXPORT_RECORD, experiment_of, write_record


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
    target, step = Path(args.target_dir).expanduser(), int(actor.parent.name.rsplit("_", 1)[-1])
    experiment = experiment_of(Path(args.checkpoint_root).expanduser())
    print(f"[export] {'LoRA ' if is_lora(actor) else ''}checkpoint {actor} (experiment {experiment}, step {step})")
    print("[export] " + " ".join(shlex.quote(c) for c in command))
    if args.dry_run:
        return 0
    status = subprocess.call(command)
    if status == 0:
        write_record(target, actor, experiment, step)
        print(f"[export] {target / EXPORT_RECORD}: experiment {experiment}, step {step} (names its evaluation)")
    return status


if __name__ == "__main__":
    sys.exit(main())
