"""The files through which a launcher asks a running trainer to stop, and the trainer answers.

The signal reaches the launcher; the trainer's loop runs in verl's TaskRunner, a Ray actor that may be on another
node. A file in the run's checkpoint folder (`trainer.default_local_dir`) crosses that boundary with nothing else
running: the folder is one both sides already know, on the shared storage a multi-node run needs anyway, it exists
before Ray does (a signal during start-up still counts) and after it (a request cannot be lost with a Ray actor),
and the trainer reads it at step boundaries only (one stat a step). The folder may be one another user can write
(a team's shared storage): the files are written and read without following a link, and one that is not the run's
user's own says nothing (recipes/private_files.py). Standard library only.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from recipes.private_files import Folder

REQUEST_FILE = "stop_request.json"  # the launcher: finish the step in progress, save it, exit
STOPPED_FILE = "stopped.json"  # the trainer: it stopped on request, and what it saved
LATEST_FILE = "latest_checkpointed_iteration.txt"  # verl's: the step of the newest whole checkpoint
# "stopped, resumable" (sysexits.h EX_TEMPFAIL: a temporary failure, try again): the launcher's status after a stop
# it was asked for, apart from 0 (trained to the end), 1 (a launch error) and main_ppo's own failures; a batch
# script requeues on it, and SLURM's RequeueExit=75 does so by itself
EXIT_RESUMABLE = 75


def _write(path: Path, data: dict) -> None:
    with Folder.open(path.parent, create=True) as folder:  # never through a link another user planted there
        folder.write(path.name, json.dumps(data))  # whole or absent, for a reader on another node


def _read(path: Path) -> dict | None:
    """What the run's user wrote there: a file another user put in a shared folder asks nothing of the run."""
    try:
        with Folder.open(path.parent) as folder:
            data = folder.read_own(path.name)
        return json.loads(data) if data is not None else None
    except (OSError, ValueError):
        return None


def request_stop(checkpoint_dir: str | Path, why: str) -> None:
    _write(Path(checkpoint_dir) / REQUEST_FILE, {"why": why, "time": time.time()})


def stop_requested(checkpoint_dir: str | Path) -> dict | None:
    return _read(Path(checkpoint_dir) / REQUEST_FILE)


def record_stopped(checkpoint_dir: str | Path, trained: int, saved: int | None) -> None:
    """The trainer's answer: the last step it trained, and the step of the checkpoint that holds it (None: none)."""
    _write(Path(checkpoint_dir) / STOPPED_FILE, {"trained": trained, "saved": saved})


def read_stopped(checkpoint_dir: str | Path) -> dict | None:
    return _read(Path(checkpoint_dir) / STOPPED_FILE)


def clear(checkpoint_dir: str | Path) -> None:
    """Before a launch: a request or an answer left by an earlier launch is not this one's."""
    try:
        folder = Folder.open(checkpoint_dir)
    except FileNotFoundError:
        return
    with folder:
        for name in (REQUEST_FILE, STOPPED_FILE):
            folder.unlink(name)


def latest_checkpoint(checkpoint_dir: str | Path) -> int | None:
    """The step verl resumes from (resume_mode=auto), or None (also when another user wrote that file)."""
    try:
        with Folder.open(checkpoint_dir) as folder:
            data = folder.read_own(LATEST_FILE)
        return int(data.decode().strip()) if data is not None else None
    except (OSError, ValueError):
        return None
