"""Where a run writes, and whether it fits: checkpoints pruned and the disk large enough, outputs no other user can
change, and on several nodes outputs on storage every node shares (a relative or repo-relative path lands in Ray's
per-node copy of the repo, /tmp/ray/session_*/.../_ray_pkg_*: each node keeps its own FSDP shards, and they vanish
with the session)."""

from __future__ import annotations

import json
import math
import os
import shutil
from pathlib import Path

from omegaconf import DictConfig

from recipes.config_view import ConfigView
from recipes.constants import REPO_ROOT
from recipes.models import ModelSource
from recipes.preflight.findings import Report
from recipes.private_files import why_untrusted

OUTPUT_KEYS = ("default_local_dir", "rollout_data_dir", "validation_data_dir")
# An FSDP save holds the fp32 parameter shards (4 bytes) and Adam's two fp32 moments (8 bytes) per parameter;
# with LoRA the optimizer state covers the adapters only.
BYTES_PER_PARAM_FULL = 12
BYTES_PER_PARAM_LORA = 4
NETWORK_FILESYSTEMS = frozenset({
    "nfs", "nfs4", "lustre", "gpfs", "beegfs", "fhgfs", "cephfs", "ceph", "cifs", "smb3", "smbfs", "glusterfs",
    "wekafs", "panfs", "orangefs", "ocfs2", "gfs2", "afs", "9p", "virtiofs",
})


# ---- checkpoints -------------------------------------------------------------------------------------

def model_parameter_count(model: ModelSource) -> int | None:
    """From the tensor shapes in the model's safetensors headers on this machine (a local folder or the Hugging
    Face cache's snapshot): no weights are read. None when the model is not here yet."""
    files = sorted(model.folder.glob("*.safetensors")) if model.folder and model.folder.is_dir() else []
    return sum(_safetensors_parameters(f) for f in files) if files else None


def _safetensors_parameters(path: Path) -> int:
    with path.open("rb") as f:  # an 8-byte little-endian header length, then a JSON header of name -> shape
        header = json.loads(f.read(int.from_bytes(f.read(8), "little")))
    return sum(math.prod(t["shape"]) for name, t in header.items() if name != "__metadata__")


def expected_saves(view: ConfigView, steps: int | None) -> int | None:
    """Checkpoints on disk at the run's end (verl also saves at the last step); None while the steps are unknown."""
    if view.save_freq <= 0:
        return 0
    if steps is None:
        return None
    saves = math.ceil(steps / view.save_freq)
    return min(saves, view.max_ckpt_to_keep) if view.max_ckpt_to_keep else saves


def check_checkpoint_space(view: ConfigView, steps: int | None, model: ModelSource, report: Report,
                           params: int | None = None) -> None:
    saves = expected_saves(view, steps)
    if not saves:
        return
    if params is None:  # the weights here, else the size its config.json or the recipe's table gives
        size, _ = model.size()
        params = model_parameter_count(model) or (size.parameters if size else None)
    if params is None:
        report.warn(f"cannot size the checkpoints ({model.name} is not on this machine yet): "
                    f"each save holds ~{BYTES_PER_PARAM_FULL} bytes per parameter (~37 GB for a 3B model)")
        return
    per_save = params * (BYTES_PER_PARAM_LORA if view.lora else BYTES_PER_PARAM_FULL)
    need, where = saves * per_save, _existing_ancestor(Path(os.path.expanduser(view.default_local_dir)))
    free = shutil.disk_usage(where).free
    if free < need:
        report.warn(f"{where} has {free / 1e9:.0f} GB free but {saves} checkpoint(s) of ~{per_save / 1e9:.1f} GB need "
                    f"~{need / 1e9:.0f} GB; free space, move OUTPUT_DIR, or lower trainer.max_actor_ckpt_to_keep")


def _existing_ancestor(path: Path) -> Path:
    path = path.absolute()
    while not path.exists():
        path = path.parent
    return path


# ---- several nodes ------------------------------------------------------------------------------------

def check_shared_outputs(config: DictConfig, report: Report) -> None:
    """On more than one node every output dir must be one absolute path on storage all nodes share."""
    if int(config.trainer.nnodes) <= 1:
        return
    for key in OUTPUT_KEYS:
        value = config.trainer.get(key)
        if not value:
            continue
        path = Path(os.path.expanduser(str(value)))
        if not path.is_absolute():
            report.error(f"trainer.{key}={value} is relative: on {config.trainer.nnodes} nodes it lands in Ray's "
                         "per-node copy of the repo; set OUTPUT_DIR to an absolute path on shared storage")
        elif path.resolve() == REPO_ROOT or REPO_ROOT in path.resolve().parents or "/tmp/ray" in str(path):
            report.error(f"trainer.{key}={value} is inside the repo or Ray's temp dir, which Ray copies per node and "
                         "deletes with the session; set OUTPUT_DIR to an absolute path on shared storage")
        else:
            fstype = filesystem_type(path)
            if fstype is not None and fstype not in NETWORK_FILESYSTEMS and not fstype.startswith("fuse"):
                report.warn(f"trainer.{key}={value} is on a local '{fstype}' filesystem: with "
                            f"{config.trainer.nnodes} nodes each node writes its own part there; use storage every "
                            "node mounts (NFS, Lustre, ...)")


def check_outputs_private(config: DictConfig, report: Report) -> None:
    """The recipe writes its own files in OUTPUT_DIR so that another user who may write there redirects none of them
    (recipes/private_files.py); verl writes its checkpoints and dumps there by path, and loads a checkpoint it finds
    there on resume. Said once, when another user could change the folder or one above it."""
    for key in OUTPUT_KEYS:
        value = config.trainer.get(key)
        if not value or not os.path.isabs(os.path.expanduser(str(value))):
            continue
        why = why_untrusted(os.path.expanduser(str(value)))
        if why:
            report.warn(f"trainer.{key}={value}: {why}; verl writes its checkpoints and dumps there by path, and "
                        "another user who can write it could redirect them or plant a checkpoint a resume loads: give "
                        "OUTPUT_DIR a folder only you can write")
            return


def filesystem_type(path: Path, mounts_file: str = "/proc/mounts") -> str | None:
    """The type of the filesystem holding `path` (longest mount point that contains it), or None if unknown."""
    try:
        lines = Path(mounts_file).read_text().splitlines()
    except OSError:
        return None
    target, best, best_type = path.absolute(), -1, None
    for line in lines:
        parts = line.split()
        if len(parts) < 3:
            continue
        mount = Path(parts[1].replace("\\040", " "))
        if (mount == target or mount in target.parents) and len(str(mount)) > best:
            best, best_type = len(str(mount)), parts[2]
    return best_type
