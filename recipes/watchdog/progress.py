"""Progress, as main_ppo already prints it (verl 0.9.1, verl/trainer/ppo/ray_trainer.py unless said): each line of
its output (the trainer runs in Ray's TaskRunner actor, whose lines Ray prefixes with `(TaskRunner pid=N) `) either
says the run moved on, or nothing.

- `step:N - ...`: the console logger's line of training step N (verl/utils/logger/aggregate_logger.py); step 0
  is the initial validation's metrics;
- `Training Progress: ..| N/T`: the tqdm bar, one update per training step (on stderr; printed whatever the
  loggers, so a run without the console logger still shows its steps);
- `validation generation end`: each validation batch generated; `Initial/Final validation metrics`;
- `local_global_step_folder: ...`: a checkpoint being saved;
- `Training from scratch`, `Resuming from ...`: the workers are up and the trainer starts its loop;
- `Dumped generations to ...`: a rollout or validation dump written.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_STEP = re.compile(r"\bstep:(\d+) - ")
_BAR = re.compile(r"Training Progress:\s*\d+%\|[^|]*\|\s*(\d+)/\d+")
_EVENTS = (
    ("validation generation end", "a validation batch"),
    ("Initial validation metrics", "the initial validation"),
    ("Final validation metrics", "the final validation"),
    ("local_global_step_folder:", "a checkpoint save"),
    ("Training from scratch", "the trainer's start"),
    ("Resuming from ", "the trainer's start (resumed)"),
    ("Dumped generations to ", "a generations dump"),
)


@dataclass(frozen=True)
class Progress:
    what: str
    step: int | None = None  # a training step (>= 1) that is done


def progress_in(line: str) -> Progress | None:
    """The progress one line of main_ppo's output reports, if any."""
    match = _STEP.search(line)
    if match:
        step = int(match.group(1))
        return Progress(f"step {step}", step) if step > 0 else Progress("the initial validation's metrics")
    match = _BAR.search(line)
    if match and int(match.group(1)) > 0:
        step = int(match.group(1))
        return Progress(f"step {step}", step)
    for marker, what in _EVENTS:
        if marker in line:
            return Progress(what)
    return None
