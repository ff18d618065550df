"""`python scripts/bench_rollout.py`: the rollout benchmark's command line (its parts:
scripts/harness/bench_rollout/)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter
from contextlib import ExitStack
from pathlib import Path

from data_prep.sources import SAMPLE_DIR
from harness.bench_rollout import PHASES, PROFILE, log
from harness.bench_rollout import __doc__ as bench_doc
from harness.bench_rollout.arms import run_arms
from harness.bench_rollout.figures import print_goals, report, result_line
from harness.bench_rollout.setup import setup

# the CI shape (tests/test_bench_rollout.py): one arm, one LLM stand-in, no profiler; the arguments after it win
QUICK = ["--steps", "2", "--prompts", "8", "--n", "4", "--workers", "2", "--servers", "1", "--arms", "recipe",
         "--profile-rate", "0"]


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=bench_doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=3, help="steps (the first counts as warm-up when there are more)")
    p.add_argument("--prompts", type=int, default=256, help="prompts per step (data.train_batch_size)")
    p.add_argument("--n", type=int, default=16, help="rollouts per prompt (actor_rollout_ref.rollout.n)")
    p.add_argument("--workers", type=int, default=8, help="agent-loop workers (rollout.agent.num_workers)")
    p.add_argument("--servers", type=int, default=2, help="LLM server stand-ins behind verl's load balancer")
    p.add_argument("--arms", default=",".join(PHASES),
                   help=f"comma-separated, of {', '.join(PHASES)}: run side by side, each on --workers / arms workers "
                        "with --prompts / arms prompts a step (the same prompts)")
    p.add_argument("--trace-all", action="store_true", help="the recipe arm traces every trajectory")
    p.add_argument("--tool-set", default="calculator", help="as TOOL_SET (data prep and config)")
    p.add_argument("--profile-rate", type=int, default=50, help="py-spy samples per second per worker (0: off)")
    p.add_argument("--ack-timeout", type=float, default=120.0,
                   help="seconds to wait after the last step for the endpoint to acknowledge the traced calls")
    p.add_argument("--gsm8k-dir", type=Path, default=Path(os.environ.get("GSM8K_DIR") or SAMPLE_DIR),
                   help="GSM8K's train.jsonl / test.jsonl (default: $GSM8K_DIR, else data_prep/gsm8k_sample)")
    p.add_argument("--work-dir", type=Path, help="keep data, spool and profiles here (default: a temporary dir)")
    p.add_argument("--json", type=Path, help="write every figure here")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--verbose", action="store_true", help="show the Ray workers' logs")
    p.add_argument("--quick", action="store_true", help=f"the CI shape: {' '.join(QUICK)}")
    argv = sys.argv[1:] if argv is None else list(argv)
    args = p.parse_args([*QUICK, *argv] if "--quick" in argv else argv)  # given arguments after QUICK win
    args.arms = [x for x in args.arms.split(",") if x]
    unknown = set(args.arms) - set(PHASES)
    if unknown or not args.arms or len(set(args.arms)) != len(args.arms):
        p.error(f"--arms: distinct names of {', '.join(PHASES)}, not {args.arms}")
    if min(args.steps, args.prompts, args.n, args.workers, args.servers) < 1:
        p.error("--steps, --prompts, --n, --workers and --servers must be positive")
    if args.workers % len(args.arms) or args.prompts % args.workers:
        p.error(f"--workers ({args.workers}) must be a multiple of the arms ({len(args.arms)}) and --prompts "
                f"({args.prompts}) of --workers: verl splits a step into equal chunks, and whole GRPO groups keep the "
                "traced count exact")
    if not (args.gsm8k_dir / "train.jsonl").is_file():
        p.error(f"no GSM8K at {args.gsm8k_dir} (train.jsonl): pass --gsm8k-dir")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    log(f"{args.steps} steps x {args.prompts} prompts x {args.n} rollouts on {args.workers} agent-loop workers, "
        f"{args.servers} LLM server stand-ins, profile {PROFILE}, arms {', '.join(args.arms)} side by side"
        + (", tracing every trajectory" if args.trace_all else ""))
    started = time.perf_counter()
    with ExitStack() as stack:
        ctx = setup(args, stack)
        results = run_arms(args, ctx)
        servers = [ray_get(s.stats.remote()) for s in ctx.servers.values()]
        figures = report(args, results, ctx.recorder)
        print_goals(args, figures)
    print("\n" + ctx.relay_summary)
    kinds = Counter()
    for stats in servers:
        kinds.update(stats)
    log(f"LLM stand-in: {dict(kinds)}")
    if kinds["unknown_question"]:
        raise RuntimeError(f"{kinds['unknown_question']} prompts held no GSM8K training question")
    log(f"total wall time {time.perf_counter() - started:.0f} s")
    if args.json:
        kept = {phase: dict(r, made_calls={str(k): v for k, v in r["made_calls"].items()})
                for phase, r in results.items()}
        args.json.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "results": kept,
                                         "figures": figures}, default=str, indent=1))
    print(result_line(args, results, figures))
    return 0


def ray_get(ref):
    import ray

    return ray.get(ref)


if __name__ == "__main__":
    sys.exit(main())
