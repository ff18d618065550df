"""The preflight as the launcher runs it, in its own process: compose the config exactly as main_ppo will, run
verl's validation, then every check (recipes/preflight/checks.py). Says what it found on `out` (stderr), one line
each: warnings and notes go on, errors stop the launch. gsm8k-preflight is the same, as a command."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import TextIO

from omegaconf import DictConfig

from recipes.preflight.checks import run_all
from recipes.preflight.compose import compose_config, validate_like_verl
from recipes.preflight.division import division_problems
from recipes.preflight.findings import Report
from recipes.preflight.stale_keys import stale_warnings
from recipes.preflight.value_types import mistyped_values

OK_LINE = "[preflight] ok: config composes, verl validates it, data/tools/reward/agent loops/tracing agree"


@dataclass
class Preflight:
    config: DictConfig | None  # None: it does not compose, or verl rejects it
    report: Report | None

    @property
    def ok(self) -> bool:
        return self.config is not None and not self.report.errors


def run_preflight(overrides: list[str], launch: bool = False, submit: bool = False,
                  traces_offline: bool | None = None, out: TextIO | None = None,
                  also: Callable[[DictConfig, Report], None] | None = None) -> Preflight:
    """launch: about to train on this node (also GPUs, credentials, disk); submit: about to submit a Ray job
    (also credentials, disk); also: the caller's own check of the composed config (the launcher's trace budget),
    run with the others, before the verdict. verl prints while it validates and loads tools: that goes to `out`
    too."""
    out = out or sys.stderr
    with contextlib.redirect_stdout(out):
        result = _check(overrides, launch, submit, traces_offline, out, also)
    if result.config is not None:
        if result.report.errors:
            print(f"[preflight] {len(result.report.errors)} problem(s); nothing was started.", file=out)
        else:
            print(OK_LINE, file=out)
    return result


def _check(overrides, launch, submit, traces_offline, out, also) -> Preflight:
    for warning in stale_warnings(overrides):
        print(f"[preflight] WARNING: {warning}", file=out)
    try:
        config = compose_config(overrides)
    except Exception as err:
        print(f"[preflight] ERROR: the config does not compose: {err}".replace("\n", " "), file=out)
        return Preflight(None, None)
    try:  # before verl's validation, whose AssertionError says less
        divided = division_problems(config)
    except (TypeError, ValueError):  # a value of the wrong kind: verl's validation below names it
        divided = []
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
    report = run_all(config, launch=launch, submit=submit, traces_offline=traces_offline)
    if also is not None and not report.errors:
        also(config, report)
    for note in report.notes:
        print(f"[preflight] {note}", file=out)
    for warning in report.warnings:
        print(f"[preflight] WARNING: {warning}", file=out)
    for error in report.errors:
        print(f"[preflight] ERROR: {error}", file=out)
    return Preflight(config, report)


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
