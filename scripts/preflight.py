"""Preflight for scripts/run_gsm8k_grpo.sh: everything that can be checked before a GPU is used.

    python scripts/preflight.py [--launch | --submit | --node-check] [--print-plan] [--write-config FILE] -- <overrides>

Composes the recipe config exactly as the launch will, runs verl's validate_config and builds the rollout and
actor config dataclasses, then checks data, tools, reward, agent loops, tracing, LoRA, rollout concurrency and
(on several nodes) shared outputs; with --launch also this node's GPUs, W&B credentials and disk space; with
--submit (a Ray job) credentials and disk space. Warnings go to stderr; errors too, one line each, exit 1.
--node-check (the launcher's CHECK_ONLY=1) runs every --launch check and prints a line for each GPU-node check
(GPUs seen, NVIDIA driver, CUDA compiler, host compiler, SGLang's patched header, the JIT kernel caches and the
modules of the first-use census they lack), then a verdict; it starts nothing, so a node is checked in seconds.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path

from omegaconf import OmegaConf

from recipes.launch.plan import LEGACY_TRAINER_NOTE, plan_lines, write_config
from recipes.preflight.checks import run_all
from recipes.preflight.compose import compose_config, validate_like_verl
from recipes.preflight.stale_keys import stale_warnings
from recipes.preflight.value_types import mistyped_values
from recipes.trace_location import weave_project_url, where_traces_go


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--launch", action="store_true", help="about to train on this node: also GPUs, credentials, disk")
    mode.add_argument("--submit", action="store_true", help="about to submit a Ray job: also credentials, disk")
    mode.add_argument("--node-check", action="store_true",
                      help="check this node as --launch does, with a line per GPU-node check, and stop there")
    p.add_argument("--print-plan", action="store_true",
                   help="print what the launch would do (model, data, tools, GPUs, batch, tracing, outputs)")
    p.add_argument("--write-config", metavar="FILE", help="write the composed config (YAML) to FILE")
    p.add_argument("--trace-backend-to", metavar="FILE",
                   help="write 'weave' or 'off' to FILE: whether the run traces (the launcher starts a relay then)")
    p.add_argument("--trace-route", choices=("off", "auto", "offline"),
                   help="say once where the traces go: off = workers send to W&B, auto/offline = via this node's "
                        "trace relay (TRACE_RELAY)")
    p.add_argument("--trace-spool", metavar="DIR", help="the trace relay's spool directory")
    p.add_argument("overrides", nargs="*")
    args = p.parse_args(argv)
    # verl prints as it validates and loads tools; keep stdout for the plan and the command alone
    with contextlib.redirect_stdout(sys.stderr):
        config, report = _check(args)
    if config is None:
        return 1
    if args.write_config:
        write_config(config, args.write_config)
    if args.trace_backend_to:
        Path(args.trace_backend_to).write_text("weave" if _traces(config) else "off")
    if args.node_check:
        return _node_verdict(report)
    if report.errors:
        print(f"[preflight] {len(report.errors)} problem(s); nothing was started.", file=sys.stderr)
        return 1
    print("[preflight] ok: config composes, verl validates it, data/tools/reward/agent loops/tracing agree",
          file=sys.stderr)
    if args.trace_route and _traces(config):  # the workers print no per-call links: this line is the one
        url = weave_project_url(config.trainer.project_name)
        print(f"[traces] {where_traces_go(url, config.trainer.experiment_name, args.trace_route, args.trace_spool)}",
              file=sys.stderr)
    if args.print_plan:
        print("\n".join(plan_lines(config, args.write_config)))
    elif not OmegaConf.select(config, "trainer.use_v1"):
        print(f"[launch] trainer: {LEGACY_TRAINER_NOTE}", file=sys.stderr)
    return 0


def _node_verdict(report) -> int:
    """The node check's last line: the launch would (not) start here; 0 or 1 as the launch preflight's exit."""
    if report.errors:
        print(f"[preflight] node check: {len(report.errors)} problem(s) above would stop a launch here; nothing was "
              "started", file=sys.stderr)
        return 1
    print(f"[preflight] node check: ok, a launch would start here ({len(report.warnings)} warning(s)); nothing was "
          "started", file=sys.stderr)
    return 0


def _traces(config) -> bool:
    return OmegaConf.select(config, "actor_rollout_ref.rollout.trace.backend") == "weave"


def _check(args):
    for warning in stale_warnings(args.overrides):
        print(f"[preflight] WARNING: {warning}", file=sys.stderr)
    try:
        config = compose_config(args.overrides)
    except Exception as err:
        print(f"[preflight] ERROR: the config does not compose: {err}".replace("\n", " "), file=sys.stderr)
        return None, None
    try:
        validate_like_verl(config)
    except Exception as err:
        # verl's own message for a value of the wrong kind is a TypeError from its arithmetic: name the value
        try:
            mistyped = mistyped_values(config, compose_config([o for o in args.overrides if o.startswith("profile=")]))
        except Exception:  # the reference does not compose either: verl's own message is all there is
            mistyped = []
        for line in mistyped or [f"verl rejects the config: {type(err).__name__}: {err}".replace("\n", " ")]:
            print(f"[preflight] ERROR: {line}", file=sys.stderr)
        return None, None
    report = run_all(config, launch=args.launch or args.node_check, submit=args.submit)
    for note in report.notes:
        print(f"[preflight] {note}", file=sys.stderr)
    for warning in report.warnings:
        print(f"[preflight] WARNING: {warning}", file=sys.stderr)
    for error in report.errors:
        print(f"[preflight] ERROR: {error}", file=sys.stderr)
    return config, report


if __name__ == "__main__":
    sys.exit(main())
