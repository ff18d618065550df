"""The preflight as the launcher runs it, in its own process: compose the config exactly as main_ppo will, run
verl's validation, apply the trace budget, work out the run's facts once (recipes/preflight/facts.py), then every
check (recipes/preflight/checks.py). Says what it found on `out` (stderr), one line each: warnings and notes go on,
errors stop the launch. gsm8k-preflight is the same, as a command."""

from __future__ import annotations

import contextlib
import sys
from dataclasses import dataclass, field
from typing import TextIO

from omegaconf import DictConfig

from recipes.config_view import ConfigView
from recipes.preflight.checks import run_all
from recipes.preflight.compose import compose_config, validate_like_verl
from recipes.preflight.division import division_problems
from recipes.preflight.facts import RunFacts, facts_of
from recipes.preflight.findings import Report
from recipes.preflight.stale_keys import stale_warnings
from recipes.preflight.trace_budget import apply_budget, budget_overrides
from recipes.preflight.value_types import mistyped_values
from recipes.tracing.volume import TraceBudgetError

OK_LINE = "[preflight] ok: config composes, verl validates it, data/tools/reward/agent loops/tracing agree"


@dataclass(frozen=True)
class PreflightInputs:
    """What a launch asks of its preflight, from its knobs (recipes/launch/knobs.py reads them; no check reads a
    knob from the environment)."""

    launch: bool = False  # about to train on this node: also its GPUs and GPU env, credentials, disk
    submit: bool = False  # about to submit a Ray job: also credentials, disk
    dry_run: bool = False  # DRY_RUN=1: what a launch checks that needs no GPU (credentials, disk), the rest where a
    #                        GPU is visible, and one line for what it could not check
    traces_offline: bool = False  # TRACE_RELAY=offline: traces kept on disk, no W&B key needed for them
    gpu_memory_gb: float | None = None  # GPU_MEMORY_GB: the memory plan's GPU where nvidia-smi does not answer
    trace_gb_per_day: float | None = None  # TRACE_GB_PER_DAY: the GRPO groups a step traced within it


@dataclass
class Preflight:
    config: DictConfig | None  # None: it does not compose, or verl rejects it
    report: Report | None
    facts: RunFacts | None = None
    overrides: list[str] = field(default_factory=list)  # what main_ppo gets besides the launch's: the trace budget's

    @property
    def ok(self) -> bool:
        return self.config is not None and not self.report.errors


def run_preflight(overrides: list[str], inputs: PreflightInputs = PreflightInputs(),
                  out: TextIO | None = None) -> Preflight:
    """verl prints while it validates and loads tools: that goes to `out` too."""
    out = out or sys.stderr
    with contextlib.redirect_stdout(out):
        result = _check(overrides, inputs, out)
    if result.config is not None:
        if result.report.errors:
            print(f"[preflight] {len(result.report.errors)} problem(s); nothing was started.", file=out)
        else:
            print(OK_LINE, file=out)
    return result


def _check(overrides, inputs: PreflightInputs, out) -> Preflight:
    for warning in stale_warnings(overrides):
        print(f"[preflight] WARNING: {warning}", file=out)
    try:
        config = compose_config(overrides)
    except Exception as err:
        print(f"[preflight] ERROR: the config does not compose: {err}".replace("\n", " "), file=out)
        return Preflight(None, None)
    try:  # before verl's validation, whose AssertionError says less
        facts = facts_of(config, inputs.gpu_memory_gb)
    except (TypeError, ValueError):  # a value of the wrong kind: verl's validation below names it
        facts = None
    divided = division_problems(facts.view, facts.breaks) if facts else []
    for line in divided:
        print(f"[preflight] ERROR: {line}", file=out)
    if divided:
        return Preflight(None, None)
    try:
        validate_like_verl(config)
    except Exception as err:
        # verl's own message for a value of the wrong kind is a TypeError from its arithmetic: name the value
        try:
            mistyped = mistyped_values(config, compose_config([o for o in overrides if o.startswith("profile=")]))
        except Exception:  # the reference does not compose either: verl's own message is all there is
            mistyped = []
        for line in mistyped or [f"verl rejects the config: {type(err).__name__}: {err}".replace("\n", " ")]:
            print(f"[preflight] ERROR: {line}", file=out)
        return Preflight(None, None)
    report = Report()
    added = _trace_budget(config, overrides, inputs.trace_gb_per_day, report, out)
    if added or facts is None:  # the budget's traced groups, or a config only verl's validation made sense of
        facts = facts_of(config, inputs.gpu_memory_gb)
    run_all(facts, report, launch=inputs.launch, submit=inputs.submit, dry_run=inputs.dry_run,
            traces_offline=inputs.traces_offline)
    for note in report.notes:
        print(f"[preflight] {note}", file=out)
    for warning in report.warnings:
        print(f"[preflight] WARNING: {warning}", file=out)
    for error in report.errors:
        print(f"[preflight] ERROR: {error}", file=out)
    return Preflight(config, report, facts, added)


def _trace_budget(config: DictConfig, overrides: list[str], gb_per_day: float | None, report: Report,
                  out) -> list[str]:
    """TRACE_GB_PER_DAY as main_ppo's overrides, applied to the composed config before any check reads it; a budget
    that cannot apply is an error of the preflight (one line)."""
    if gb_per_day is None:
        return []
    try:
        added, note = budget_overrides(ConfigView.of(config), gb_per_day, overrides)
    except TraceBudgetError as err:
        report.error(str(err))
        return []
    apply_budget(config, added)
    if note:
        print(f"[traces] {note}", file=out)
    return added


def node_verdict(result: Preflight, out: TextIO | None = None) -> int:
    """The node check's last line (CHECK_ONLY=1): a launch would (not) start here; 0 or 1, as the launch's
    preflight would exit."""
    out = out or sys.stderr
    if not result.ok:
        problems = len(result.report.errors) if result.report else 1
        print(f"[preflight] node check: {problems} problem(s) above would stop a launch here; nothing was started",
              file=out)
        return 1
    print(f"[preflight] node check: ok, a launch would start here ({len(result.report.warnings)} warning(s)); "
          "nothing was started", file=out)
    return 0
