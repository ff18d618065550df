"""Where an exported model came from, so that evaluations of different checkpoints never share a name (and a
folder, and a Weave Evaluation). scripts/export_checkpoint.py writes EXPORT_RECORD beside the model it exports:
the run's experiment name, the step and the checkpoint folder; scripts/eval_gsm8k.sh names its run from it.

    python -m recipes.export.provenance eval-name MODEL_PATH TOOL_SET VAL_N VAL_TEMPERATURE
"""

from __future__ import annotations

import json
import os
import re
import sys
import tempfile
from pathlib import Path

import yaml

EXPORT_RECORD = "exported_from.json"


def experiment_of(checkpoint_root: Path) -> str:
    """The experiment whose checkpoints these are: trainer.experiment_name in the hydra config of the latest
    launch that saved into this folder (the launcher puts it in <OUTPUT_DIR>/hydra/<time>/.hydra/), else the
    name of the run's folder (<OUTPUT_DIR>, whose default is outputs/<experiment>)."""
    root = checkpoint_root.resolve()
    for config in sorted(root.parent.glob("hydra/*/.hydra/config.yaml"), reverse=True):
        try:
            trainer = (yaml.safe_load(config.read_text()) or {}).get("trainer") or {}
        except (OSError, yaml.YAMLError):
            continue
        saved_to = trainer.get("default_local_dir")
        if saved_to and Path(saved_to).resolve() == root and trainer.get("experiment_name"):
            return str(trainer["experiment_name"])
    return root.parent.name if root.name == "checkpoints" else root.name


def write_record(target_dir: Path, actor_dir: Path, experiment: str, step: int) -> None:
    """EXPORT_RECORD in target_dir, written atomically."""
    record = {"experiment": experiment, "step": step, "checkpoint": str(actor_dir.resolve())}
    with tempfile.NamedTemporaryFile("w", dir=target_dir, prefix=f".{EXPORT_RECORD}.", delete=False) as tmp:
        json.dump(record, tmp, indent=2)
        tmp.write("\n")
    os.chmod(tmp.name, 0o644)
    os.replace(tmp.name, target_dir / EXPORT_RECORD)


def read_record(model_path: str) -> dict | None:
    path = Path(os.path.expanduser(model_path)) / EXPORT_RECORD
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) and {"experiment", "step"} <= record.keys() else None


def _safe(text: str) -> str:
    """A name part that is safe as a folder name and a hydra value."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-") or "model"


def eval_name(model_path: str, tool_set: str, samples: str = "1", temperature: str = "0") -> str:
    """eval_<model>_<tool set>[_n<samples>_t<temperature>]: <model> is <experiment>_step<N> for an export that
    recorded where it came from, else the model folder's or hub id's last part; sampling is named when it is not
    the default greedy single answer."""
    record = read_record(model_path) if model_path else None
    if record:
        model = f"{_safe(str(record['experiment']))}_step{int(record['step'])}"
    else:
        model = _safe(Path(model_path.rstrip("/")).name) if model_path else "profile_model"
    name = f"eval_{model}_{_safe(tool_set)}"
    try:
        greedy = float(temperature) == 0
    except ValueError:  # the eval script refuses it; the name just carries it
        greedy = False
    if samples != "1" or not greedy:
        name += f"_n{_safe(samples)}_t{_safe(temperature)}"
    return name


def main(argv: list[str]) -> int:
    if len(argv) != 5 or argv[0] != "eval-name":
        print(__doc__.strip().splitlines()[-1].strip(), file=sys.stderr)
        return 2
    print(eval_name(*argv[1:]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
