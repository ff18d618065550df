"""Where models and checkpoints came from.

- An export: gsm8k-export-checkpoint writes EXPORT_RECORD beside the model it exports (the run's experiment
  name, the step and the checkpoint folder), so that evaluations of different checkpoints never share a name (and a
  folder, and a Weave Evaluation); scripts/eval_gsm8k.sh names its run from it.
- A run's checkpoints: a launch that trains writes RUN_RECORD in its checkpoint folder (the model, LoRA, tool set
  and reward it trains), and the preflight refuses to resume there a launch of another model or reward: verl would
  load the other run's weights and go on as if nothing changed.

    python -m recipes.export.provenance eval-name MODEL_PATH TOOL_SET VAL_N VAL_TEMPERATURE
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import yaml

from recipes.private_files import Folder

EXPORT_RECORD = "exported_from.json"
RUN_RECORD = "run_record.json"
# verl's record of the last checkpoint in trainer.default_local_dir: a launch with resume_mode auto resumes from it
CHECKPOINT_TRACKER = "latest_checkpointed_iteration.txt"


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
    _write_json(target_dir / EXPORT_RECORD, {"experiment": experiment, "step": step,
                                             "checkpoint": str(actor_dir.resolve())})


def _write_json(path: Path, record: dict) -> None:
    """Atomically (a reader never sees half a file), from the folder's descriptor: never through a link another user
    planted in a folder they may write (recipes/private_files.py)."""
    with Folder.open(path.parent, create=True) as folder:
        folder.write(path.name, json.dumps(record, indent=2) + "\n", mode=0o644)


# ---- a run's checkpoints ----------------------------------------------------------------------------------

def run_record(config) -> dict:
    """What a run's checkpoints are of, from its composed config: a resume must train the same."""
    from omegaconf import OmegaConf

    def get(key):
        value = OmegaConf.select(config, key)
        return OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value

    model = str(get("actor_rollout_ref.model.path"))
    local = Path(os.path.expanduser(model))
    tools = get("actor_rollout_ref.rollout.multi_turn.tool_config_path")
    reward = get("reward.custom_reward_function") or {}
    return {"model": str(local.resolve()) if local.is_dir() else model,
            "lora_rank": int(get("actor_rollout_ref.model.lora_rank") or 0),
            "tool_set": Path(str(tools)).stem if tools else "none",
            "reward": {"function": f"{Path(str(reward.get('path') or 'verl default')).name}:{reward.get('name')}",
                       "kwargs": reward.get("reward_kwargs") or {}}}


def checkpoint_folder(config) -> Path | None:
    """The folder verl resumes from with this config: trainer.default_local_dir when it holds a checkpoint
    (resume_mode auto), the parent of trainer.resume_from_path (resume_path); None when nothing is resumed."""
    from omegaconf import OmegaConf

    mode = OmegaConf.select(config, "trainer.resume_mode") or "auto"
    if mode == "resume_path" and OmegaConf.select(config, "trainer.resume_from_path"):
        return Path(os.path.expanduser(str(OmegaConf.select(config, "trainer.resume_from_path")))).parent
    folder = Path(os.path.expanduser(str(OmegaConf.select(config, "trainer.default_local_dir"))))
    return folder if mode == "auto" and (folder / CHECKPOINT_TRACKER).is_file() else None


def resume_mismatch(config) -> tuple[str, Path] | None:
    """(what differs, the folder) when this launch would resume a checkpoint of another model, LoRA, tool set or
    reward; None when it resumes nothing, resumes its own, or the checkpoints carry no record."""
    folder = checkpoint_folder(config)
    if folder is None:
        return None
    try:
        theirs = json.loads((folder / RUN_RECORD).read_text())
    except (OSError, ValueError):
        return None
    mine = run_record(config)
    labels = {"model": "model", "lora_rank": "LoRA rank", "tool_set": "tool set", "reward": "reward"}
    differ = [f"{labels[k]} {_short(theirs.get(k))} (this launch: {_short(mine[k])})"
              for k in labels if theirs.get(k) != mine[k]]
    return ("; ".join(differ), folder) if differ else None


def _short(value) -> str:
    if isinstance(value, dict):
        return f"{value.get('function')} {json.dumps(value.get('kwargs'), sort_keys=True)}"
    return str(value)


def write_run_record(config) -> Path:
    """RUN_RECORD in the run's checkpoint folder (trainer.default_local_dir), written at launch."""
    from omegaconf import OmegaConf

    folder = Path(os.path.expanduser(str(OmegaConf.select(config, "trainer.default_local_dir"))))
    _write_json(folder / RUN_RECORD, run_record(config))
    return folder / RUN_RECORD


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


def model_label(model_path: str) -> str:
    """A model's name in run names: <experiment>_step<N> for an export that recorded where it came from, else the
    model folder's or hub id's last part."""
    record = read_record(model_path)
    if record:
        return f"{_safe(str(record['experiment']))}_step{int(record['step'])}"
    return _safe(Path(model_path.rstrip("/")).name)


def eval_name(model_path: str, tool_set: str, samples: str = "1", temperature: str = "0") -> str:
    """eval_<model>_<tool set>[_n<samples>_t<temperature>]: <model> is <experiment>_step<N> for an export that
    recorded where it came from, else the model folder's or hub id's last part; sampling is named when it is not
    the default greedy single answer."""
    name = f"eval_{model_label(model_path) if model_path else 'profile_model'}_{_safe(tool_set)}"
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
