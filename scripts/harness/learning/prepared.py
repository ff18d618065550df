"""The GPU learning check's prepared folder: everything the check needs before SGLang starts, made on any CPU
machine by `PREPARE_ONLY=1 bash scripts/learn_gpu.sh` (WORK_DIR/prepared) and read by `PREPARED=<folder> bash
scripts/learn_gpu.sh`, which then spends the GPU's time on SGLang, GRPO and the scoring only.

    data/train.parquet, data/test.parquet     the task's rows, tools on (GRPO's prompts; the first validation file)
    data_notools/test.parquet                 the same held-out problems, tools off (the second validation file)
    model_sft/                                the SFT warm start, trained on the CPU (config, weights, tokenizer)
    launch_config.yaml                        the config the launcher composed for it (its DRY_RUN; the paths are
                                              those of the machine that prepared it)
    manifest.json                             written last: what the folder holds (each file's size and SHA-256),
                                              the knobs it was made with, the recipe version, the SFT's inits and
                                              the warm start's accuracy measured on the CPU

A folder is read only if its manifest matches: the format, the recipe version (a digest of the code that makes the
folder's contents, RECIPE_FILES), every knob the contents depend on (MADE_WITH) and every file's checksum; anything
else is refused in one line, before anything starts. A folder without a manifest was never finished.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

from recipes.constants import REPO_ROOT

FORMAT = 1
MANIFEST = "manifest.json"
# the knobs (LearnKnobs' fields) whose values the contents depend on: the task, its rows, the tokenizer, the warm start
MADE_WITH = ("task", "seed", "train_rows", "test_rows", "sft_steps", "sft_schedule_steps", "sft_tool_only_steps",
             "sft_tool_fraction", "sft_max_depth", "sft_batch", "sft_lr", "sft_weight_decay", "sft_converged_loss",
             "sft_attempts", "threads")
# the code that makes them: the task, the data prep and its tool sets, the tokenizer and model, the SFT
RECIPE_FILES = ("scripts/harness/learning/task.py", "scripts/harness/learning/small_model.py",
                "scripts/harness/learning/transcripts.py", "scripts/harness/learning/sft.py",
                "scripts/harness/qwen_tokenizer.py", "recipes/gsm8k/tool_sets.py", "data_prep/gsm8k.py",
                "data_prep/gsm8k_rows.py")
# what of a work dir the folder carries (the tools-off train rows are never read: validation only)
CARRIED = (("data/train.parquet", "data/train.parquet"), ("data/test.parquet", "data/test.parquet"),
           ("data_notools/test.parquet", "data_notools/test.parquet"), ("model_sft", "model_sft"))
LAUNCH_CONFIG = "launch_config.yaml"


class PreparedError(ValueError):
    """A prepared folder that cannot be used as asked; the message is one line."""


def recipe_version() -> str:
    """The digest of RECIPE_FILES as this checkout has them (16 hex digits)."""
    digest = hashlib.sha256()
    for name in RECIPE_FILES:
        digest.update(name.encode() + b"\0" + (REPO_ROOT / name).read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file() and p.name != MANIFEST)


def size_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def carry(work: Path, folder: Path) -> None:
    """The parts of a work dir the folder holds, copied in (the folder made anew)."""
    shutil.rmtree(folder, ignore_errors=True)
    for source, target in CARRIED:
        (folder / target).parent.mkdir(parents=True, exist_ok=True)
        if (work / source).is_dir():
            shutil.copytree(work / source, folder / target)
        else:
            shutil.copy2(work / source, folder / target)


def write_manifest(folder: Path, knobs: dict[str, str], made: dict) -> dict:
    """The manifest of everything now in `folder`, written atomically, last. `knobs`: every knob by its shell name;
    `made`: what the preparation found (SFT inits, the warm start's CPU score, the device it composed for)."""
    manifest = {
        "format": FORMAT, "recipe": recipe_version(), "recipe_files": list(RECIPE_FILES),
        "made_with": {name.upper(): knobs[name.upper()] for name in MADE_WITH},
        "knobs": dict(sorted(knobs.items())), **made,
        "files": {str(p.relative_to(folder)): {"bytes": p.stat().st_size, "sha256": _sha256(p)}
                  for p in _files(folder)},
    }
    tmp = folder / f".{MANIFEST}.tmp"
    tmp.write_text(json.dumps(manifest, indent=1) + "\n")
    with tmp.open("rb") as f:
        os.fsync(f.fileno())
    tmp.replace(folder / MANIFEST)
    return manifest


def read(folder: Path, knobs: dict[str, str]) -> dict:
    """The folder's manifest once everything matches (format, recipe, knobs, files); else PreparedError."""
    path = folder / MANIFEST
    where = f"PREPARED={folder}"
    redo = "prepare it again with this checkout: PREPARE_ONLY=1 bash scripts/learn_gpu.sh"
    if not folder.is_dir():
        raise PreparedError(f"{where} is not a folder")
    if not path.is_file():
        raise PreparedError(f"{where} has no {MANIFEST}: not a finished `PREPARE_ONLY=1 bash scripts/learn_gpu.sh` "
                            "folder")
    try:
        manifest = json.loads(path.read_text())
    except ValueError as err:
        raise PreparedError(f"{where}: {MANIFEST} is not JSON ({err})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        found = manifest.get("format") if isinstance(manifest, dict) else None
        raise PreparedError(f"{where}: {MANIFEST} is of format {found}, this checkout reads format {FORMAT}; {redo}")
    if manifest.get("recipe") != recipe_version():
        raise PreparedError(f"{where} was made by another version of the learning recipe (recipe "
                            f"{manifest.get('recipe')}, this checkout's {recipe_version()}: "
                            f"{', '.join(Path(f).name for f in RECIPE_FILES)} differ); {redo}")
    made_with = manifest.get("made_with") or {}
    differ = [name.upper() for name in MADE_WITH if made_with.get(name.upper()) != knobs.get(name.upper())]
    if differ:
        theirs = " ".join(f"{n}={made_with.get(n, '')!s}" for n in differ)
        ours = " ".join(f"{n}={knobs.get(n, '')}" for n in differ)
        raise PreparedError(f"{where} was made with {theirs}, not {ours}: run with its knobs, or prepare again "
                            "with these")
    files = manifest.get("files") or {}
    if not files:
        raise PreparedError(f"{where}: {MANIFEST} lists no files")
    for name, entry in sorted(files.items()):
        file = folder / name
        if not file.is_file():
            raise PreparedError(f"{where}: {name} is missing (the manifest lists {len(files)} files)")
        if file.stat().st_size != entry.get("bytes") or _sha256(file) != entry.get("sha256"):
            raise PreparedError(f"{where}: {name} does not match its checksum in {MANIFEST} (a partial or changed "
                                "copy); copy the folder again")
    return manifest
