"""The launcher: `python -m recipes.launch [hydra overrides]`, with the knobs in its environment.

scripts/run_gsm8k_grpo.sh is its usual front (the knobs, their defaults and --help); this program does the rest:
- PRINT_OUTPUT_DIR=1: print OUTPUT_DIR as resolved and exit (scripts/eval_gsm8k.sh, the SLURM batch script);
- CHECK_ONLY=1: the preflight a launch on this node runs, with a line per GPU-node check (GPUs, driver, CUDA and
  host compilers, SGLang's header, the first-use kernels the caches lack), then a verdict; nothing started;
- DRY_RUN=1: the preflight, the plan, the side processes and main_ppo's command; the composed config written to
  DRY_RUN_CONFIG (or a new file); nothing started;
- SUBMIT=ray: the preflight here, then a Ray job on RAY_ADDRESS whose entrypoint is this program again (--job)
  with everything resolved here (recipes/launch/ray_job.py); its logs followed until it ends;
- otherwise: the preflight, then train (recipes/launch/training.py): the trace relays (one per node), the
  evaluation watcher (PUBLISH_EVALS=1) and main_ppo as a watched child. On a Ray cluster (RAY_ADDRESS, or --job)
  main_ppo joins the cluster and every node gets a relay.

Exit status: main_ppo's when it ran; 1 when a knob or the preflight stops the launch (one line says why).
"""

from __future__ import annotations

import os
import sys

from recipes.constants import REPO_ROOT
from recipes.launch.decision import (
    CHECK_ONLY,
    DRY_RUN,
    PRINT_OUTPUT_DIR,
    SUBMIT,
    Launch,
    check_launch,
    dry_run_config_file,
    dry_run_lines,
    plan_launch,
    traces_line,
    traces_volume_line,
)
from recipes.launch.knobs import KnobError, Knobs

JOB_FLAG = "--job"


def main(argv: list[str] | None = None, environ: dict[str, str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    environ = os.environ if environ is None else environ
    if argv[:1] in (["-h"], ["--help"]):
        print(__doc__)
        return 0
    job = None
    try:
        if argv[:1] == [JOB_FLAG]:
            from recipes.launch.ray_job import load_job_secrets, read_job_payload

            argv, job = argv[1:], read_job_payload(environ)
            load_job_secrets()
            knobs = Knobs(**{name.lower(): value for name, value in job["knobs"].items()})
        else:
            knobs = Knobs.from_environ(environ)
        launch = plan_launch(knobs, argv, environ, job=job)
        if launch.mode == PRINT_OUTPUT_DIR:
            print(launch.knobs.output_dir)
            return 0
        launch.knobs.check(environ)
    except (KnobError, ValueError, TypeError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    os.chdir(REPO_ROOT)  # where main_ppo runs: a relative path in a knob or override is relative to the repo
    return {CHECK_ONLY: node_check, DRY_RUN: dry_run, SUBMIT: submit}.get(launch.mode, train)(launch, environ)


def node_check(launch: Launch, environ) -> int:
    from recipes.preflight.run import node_verdict

    return node_verdict(check_launch(launch, environ=environ))


def dry_run(launch: Launch, environ) -> int:
    launch.config_file = dry_run_config_file(launch)
    preflight = check_launch(launch, environ=environ)
    if preflight.config is None:  # nothing composed, or verl refused it: no plan to print
        return 1
    from recipes.launch.plan import write_config

    write_config(preflight.config, launch.config_file)
    _say_where_traces_go(launch)
    # a dry run with a problem still prints the plan, and exits as the launch's preflight would
    print("\n".join(dry_run_lines(launch, problems=len(preflight.report.errors))), flush=True)
    return 0 if preflight.ok else 1


def submit(launch: Launch, environ) -> int:
    from recipes.launch import ray_job

    if not launch.ray_address:
        print("error: set RAY_ADDRESS to the Ray dashboard address, e.g. http://10.0.0.1:8265", file=sys.stderr)
        return 1
    if not check_launch(launch, environ=environ).ok:
        return 1
    _say_where_traces_go(launch, volume=True)
    knobs = {name: value for name, value in launch.knobs.as_environ().items()
             if name not in ("SUBMIT", "DRY_RUN", "DRY_RUN_CONFIG", "PYTHON")}
    return ray_job.submit_and_follow(launch.ray_address, ray_job.job_payload(knobs, launch.overrides), dict(environ))


def train(launch: Launch, environ) -> int:
    from recipes.export.provenance import write_run_record
    from recipes.launch.plan import LEGACY_TRAINER_NOTE
    from recipes.launch.training import run_training

    if not check_launch(launch, environ=environ).ok:
        return 1
    try:
        write_run_record(launch.config)  # what the checkpoints will be of: a resume of another model is refused
    except PermissionError as err:  # a link or a file another user put in the checkpoint folder
        print(f"error: the run record: {err}; nothing was started", file=sys.stderr)
        return 1
    _say_where_traces_go(launch, volume=True)
    if not launch.facts.view.use_v1:
        print(f"[launch] trainer: {LEGACY_TRAINER_NOTE}", file=sys.stderr)
    for note in launch.notes:
        print(f"[launch] {note}", file=sys.stderr)
    if launch.facts.view.val_only:  # an evaluation says what it scores, whatever the profile
        from recipes.launch.plan import validation_line

        print(f"[launch] evaluating {validation_line(launch.facts.view, launch.facts.schedule)}", file=sys.stderr)
    return run_training(launch)


def _say_where_traces_go(launch: Launch, volume: bool = False) -> None:
    """Once per launch: where the traces can be opened (the workers print no link per call); `volume`: and what
    they weigh (a dry run's plan has it in its tracing row)."""
    for line in (traces_line(launch), volume and traces_volume_line(launch)):
        if line:
            print(f"[traces] {line}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
