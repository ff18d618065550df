"""Publish each validation dump of a run to Weave as an Evaluation (once; re-running sends nothing new).

    gsm8k-publish-evals --validation_dir outputs/<exp>/validation --experiment <exp> [--project P]
        [--model_path M] [--tool_set T] [--step N ...] [--k 1 --k 8] [--model_name NAME]
    # beside training: publish each validation as it lands, stop after the trainer exits
    gsm8k-publish-evals --validation_dir outputs/<exp>/validation --experiment <exp> --watch \
        --stop_when_pid_exits PID

The model of step N is `<experiment>-stepN` (step 0: the weights before any update); an evaluation-only run
(scripts/eval_gsm8k.sh, whose one dump is step 0 whatever the weights) names its model with --model_name. Needs
W&B credentials
(WANDB_API_KEY or `wandb login`); --skip_without_credentials turns their absence into a note and exit 0.
One-shot mode prints a line per step and `RESULT published=<n> skipped=<n>`.
"""

from __future__ import annotations

import argparse
import logging
import sys

from recipes.constants import PROJECT_NAME
from recipes.credentials import wandb_api_key
from recipes.results.eval_watch import logger as watch_logger
from recipes.results.eval_watch import stop_on_signals, watch
from recipes.results.weave_publish import (
    DumpError,
    Publisher,
    RunInfo,
    connect,
    describe,
    dump_paths,
    read_step_dump,
)

NO_CREDENTIALS = "no W&B credentials in this environment (set WANDB_API_KEY or run `wandb login`)"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--validation_dir", required=True, help="trainer.validation_data_dir of the run")
    p.add_argument("--project", default=PROJECT_NAME, help="W&B project, or entity/project (default: %(default)s)")
    p.add_argument("--experiment", required=True,
                   help="the run's trainer.experiment_name (the launcher's EXPERIMENT_NAME): names the models")
    p.add_argument("--model_path", help="the run's actor_rollout_ref.model.path, shown on each model")
    p.add_argument("--tool_set", help="the run's TOOL_SET, shown on each model")
    p.add_argument("--step", type=int, action="append", help="publish only this step (repeatable)")
    p.add_argument("--model_name", help="an evaluation-only run: the model's name (its dump's step is no training "
                   "step, so no -step<N>)")
    p.add_argument("--k", type=int, action="append", help="pass@k in the summary (default: 1 and samples per prompt)")
    p.add_argument("--watch", action="store_true", help="keep publishing new dumps; never fails the run it watches")
    p.add_argument("--stop_when_pid_exits", type=int, help="with --watch: last pass and exit once this process is gone")
    p.add_argument("--poll_seconds", type=float, default=30.0, help="with --watch: how often to look (default 30)")
    p.add_argument("--skip_without_credentials", action="store_true",
                   help="without W&B credentials print a note and exit 0 instead of failing")
    args = p.parse_args(argv)
    if args.stop_when_pid_exits is not None and not args.watch:
        p.error("--stop_when_pid_exits needs --watch")

    dumps = []
    if not args.watch:  # watching starts before the first dump exists
        try:
            paths = [path for path in dump_paths(args.validation_dir)
                     if args.step is None or int(path.stem) in args.step]
            if not paths:
                raise DumpError(f"no dump for step(s) {args.step} in {args.validation_dir}")
            dumps = [read_step_dump(path) for path in paths]
        except DumpError as err:
            print(f"error: {err}", file=sys.stderr)
            return 1
    if not wandb_api_key():
        if args.skip_without_credentials:
            print(f"not publishing to Weave: {NO_CREDENTIALS}")
            return 0
        print(f"error: {NO_CREDENTIALS}; nothing was published", file=sys.stderr)
        return 1

    run = RunInfo(experiment=args.experiment, model_path=args.model_path, tool_set=args.tool_set,
                  model_name=args.model_name)
    ks = tuple(args.k) if args.k else None
    if args.watch:
        # our logger only: weave logs through its own handler, a root handler would print its lines twice
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("[publish_evals %(asctime)s] %(message)s"))
        watch_logger.addHandler(handler)
        watch_logger.setLevel(logging.INFO)
        watch_logger.info("watching %s: each validation dump goes to Weave project %s as %s%s",
                          args.validation_dir, args.project, run.model_name or f"{run.experiment}-step<N>",
                          f"; stopping once pid {args.stop_when_pid_exits} exits" if args.stop_when_pid_exits else "")
        try:
            with stop_on_signals() as stop:
                failed = watch(args.validation_dir, lambda: Publisher(connect(args.project), run, ks),
                               stop_pid=args.stop_when_pid_exits, poll_s=args.poll_seconds, stop=stop)
        finally:
            watch_logger.removeHandler(handler)
        return 1 if failed else 0

    try:
        publisher = Publisher(connect(args.project), run, ks)
        results = []
        for dump in dumps:
            results.append(publisher.publish(dump))
            print(describe(results[-1]))
    except Exception as err:  # weave/W&B errors come in many types; the message is what helps
        print(f"error: publishing to Weave project {args.project!r} failed: {type(err).__name__}: {err}",
              file=sys.stderr)
        return 1
    published = sum(r.published for r in results)
    print(f"RESULT published={published} skipped={len(results) - published}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
