"""Preflight for scripts/run_gsm8k_grpo.sh: everything that can be checked before a GPU is used.

    gsm8k-preflight [--launch | --submit | --node-check] [--print-plan] [--write-config FILE] -- <overrides>

Composes the recipe config exactly as the launch will, runs verl's validate_config and builds the rollout and
actor config dataclasses, then checks data, tools, reward, agent loops, tracing, LoRA, rollout concurrency and
(on several nodes) shared outputs; with --launch also this node's GPUs, W&B credentials and disk space; with
--submit (a Ray job) credentials and disk space. Warnings go to stderr; errors too, one line each, exit 1.
--node-check (the launcher's CHECK_ONLY=1) runs every --launch check, with a line for each GPU-node check (GPUs,
NVIDIA driver, CUDA and host compilers, SGLang's patched header, the first-use kernels the JIT caches lack), then a
verdict; it starts nothing. The launcher (`python -m recipes.launch`) runs the same checks in its own process
(recipes/preflight/run.py).
"""

from __future__ import annotations

import argparse
import sys

from recipes.launch.knobs import KnobError, Knobs
from recipes.launch.plan import LEGACY_TRAINER_NOTE, plan_lines, write_config
from recipes.preflight.run import PreflightInputs, node_verdict, run_preflight


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
    p.add_argument("overrides", nargs="*")
    args = p.parse_args(argv)
    knobs = Knobs.from_environ()  # what the launcher's knobs say of the checks: GPU_MEMORY_GB, TRACE_RELAY
    try:
        knobs.check()
    except KnobError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    inputs = PreflightInputs(launch=args.launch or args.node_check, submit=args.submit,
                             traces_offline=knobs.traces_kept_offline, gpu_memory_gb=knobs.gpu_memory)
    result = run_preflight(args.overrides, inputs)
    if args.node_check:
        return node_verdict(result)
    if result.config is None:
        return 1
    if args.write_config:
        write_config(result.config, args.write_config)
    if not result.ok:
        return 1
    if args.print_plan:
        print("\n".join(plan_lines(result.facts, args.write_config, args.overrides)))
    elif not result.facts.view.use_v1:
        print(f"[launch] trainer: {LEGACY_TRAINER_NOTE}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
