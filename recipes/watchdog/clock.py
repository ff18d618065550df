"""How long a run may go without progress before the watchdog acts: the one home of that rule.

STALL_MINUTES set by the user is the limit, as given (fractions allowed). Unset, the limit is derived from the
run itself: DERIVED_FACTOR times the slowest training step seen so far (step line to step line, validation and
checkpoints included), never under DERIVED_FLOOR_S. Until the first training step of the launch is done (Ray
start, model loading, first-use kernel compiles, CUDA-graph capture, the initial validation, the first step) the
limit is FIRST_STEP_FACTOR times that, whichever way it was set. Any progress resets the clock; the limit is the
time since the last progress.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

DERIVED_FLOOR_S = 20 * 60.0
DERIVED_FACTOR = 4.0
FIRST_STEP_FACTOR = 3.0


def stall_limit_minutes(knob: str) -> float | None:
    """STALL_MINUTES as the launcher reads it: None when unset (derived), 0 when the watchdog is off."""
    return float(knob) if knob.strip() else None


@dataclass
class StallClock:
    """The last progress and the slowest step of one launch. `user_s`: STALL_MINUTES in seconds, None: derived."""

    user_s: float | None
    now: Callable[[], float] = time.monotonic
    last_progress: float = field(default=0.0)
    last_what: str = "the launch started"
    last_step: int | None = None  # the last training step done (this launch)
    slowest_step_s: float = 0.0
    _last_step_at: float | None = None

    def __post_init__(self) -> None:
        self.last_progress = self.now()

    @property
    def first_step_done(self) -> bool:
        return self._last_step_at is not None

    def progress(self, what: str, step: int | None = None) -> None:
        """Progress seen: `what` happened; `step`: a training step with this number is done. A step already counted
        is no news: verl prints each step twice (its console line, tqdm's progress line) and tqdm redraws that line
        when it closes, which Ray may forward after the final validation's line (stdout and stderr travel apart)."""
        now = self.now()
        if step is not None and self.last_step is not None and step <= self.last_step:
            return
        self.last_progress, self.last_what = now, what
        if step is None:
            return
        if self._last_step_at is not None:
            self.slowest_step_s = max(self.slowest_step_s, now - self._last_step_at)
        self.last_step, self._last_step_at = step, now

    def base_limit_s(self) -> float:
        if self.user_s is not None:
            return self.user_s
        return max(DERIVED_FLOOR_S, DERIVED_FACTOR * self.slowest_step_s)

    def limit_s(self) -> float:
        return self.base_limit_s() * (1.0 if self.first_step_done else FIRST_STEP_FACTOR)

    def idle_s(self) -> float:
        return self.now() - self.last_progress

    def overdue(self) -> bool:
        return self.idle_s() > self.limit_s()

    def describe_limit(self) -> str:
        """How the limit was set, for the console and the report."""
        minutes = self.limit_s() / 60
        if self.user_s is not None:
            how = "STALL_MINUTES"
        elif self.slowest_step_s and DERIVED_FACTOR * self.slowest_step_s > DERIVED_FLOOR_S:
            how = f"{DERIVED_FACTOR:g}x the slowest step, {self.slowest_step_s / 60:.1f} min"
        else:
            how = f"the floor of {DERIVED_FLOOR_S / 60:g} min"
        first = "" if self.first_step_done else f", x{FIRST_STEP_FACTOR:g} until the first step is done"
        return f"{minutes:.4g} min ({how}{first})"
