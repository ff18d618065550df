"""What a launch does, decided from its knobs and the user's hydra overrides, before anything starts.

    launch = plan_launch(Knobs.from_environ(), ["trainer.total_epochs=1"])   # the mode, main_ppo's overrides
    preflight = check_launch(launch)                                         # + the composed config, the relays
    launch.main_ppo_command(), launch.relay, launch.watcher_command(), dry_run_lines(launch)

`python -m recipes.launch` (what scripts/run_gsm8k_grpo.sh runs) acts on these; tests and benchmarks read them.
"""

from __future__ import annotations

import os
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path

from omegaconf import OmegaConf

from recipes.constants import CONFIG_DIR, CONFIG_NAME, REPO_ROOT
from recipes.launch.knobs import Knobs, launch_overrides
from recipes.launch.plan import plan_lines
from recipes.launch.relays import RelayPlan, relay_plan

# The modes, in the order the knobs pick them. CHECK_ONLY: the checks a launch on this node runs (GPUs, driver,
# compilers, kernel caches, ...), a line each, and nothing started.
PRINT_OUTPUT_DIR, CHECK_ONLY, DRY_RUN, SUBMIT, TRAIN = "print_output_dir", "check_only", "dry_run", "submit", "train"
# ray_init settings that size a Ray the launch starts itself; Ray refuses them when joining an existing cluster
CLUSTER_SIZING = ("num_cpus", "num_gpus", "resources", "object_store_memory")
MAIN_PPO = "recipes.trainer.main_ppo"


@dataclass
class Launch:
    knobs: Knobs
    mode: str
    user_overrides: list[str]
    overrides: list[str]  # what main_ppo gets after --config-name: the launcher's, then the user's
    cluster: bool = False  # main_ppo joins a running Ray cluster (RAY_ADDRESS, or this is a Ray job on one)
    job: bool = False  # this process runs on the cluster as the entrypoint of a Ray job (SUBMIT=ray)
    python: str = "python3"
    ray_address: str = ""
    config_file: str | None = None  # DRY_RUN: where the composed config is written
    config: object = None  # the composed config, once the preflight has run
    facts: object = None  # what the preflight worked out of it (recipes/preflight/facts.py RunFacts)
    relay: RelayPlan | None = None
    notes: list[str] = field(default_factory=list)

    def main_ppo_command(self) -> list[str]:
        # verl's main_ppo with the recipe's TaskRunner: a stop at a step boundary, saved (recipes/trainer/)
        return [self.python, "-m", MAIN_PPO, f"--config-path={CONFIG_DIR}",
                f"--config-name={CONFIG_NAME}", *self.overrides]

    def watcher_command(self, launcher_pid: int | None = None) -> list[str] | None:
        """PUBLISH_EVALS=1: publishes each validation as it lands and exits after the launcher does."""
        if self.knobs.publish_evals != "1":
            return None
        command = [self.python, "-m", "recipes.results.publish", "--validation_dir",
                   f"{self.knobs.output_dir}/validation", "--experiment", self.knobs.experiment_name,
                   "--tool_set", self.knobs.tool_set, "--watch", "--stop_when_pid_exits",
                   str(launcher_pid if launcher_pid is not None else os.getpid())]
        if self.knobs.model_path:
            command += ["--model_path", self.knobs.model_path]
        return command

    @property
    def traces(self) -> bool:
        """Whether the composed config traces rollouts to Weave."""
        return self.facts is not None and self.facts.view.traces


def plan_launch(knobs: Knobs, user_overrides: list[str] | tuple[str, ...] = (), environ: dict | None = None,
                job: dict | None = None) -> Launch:
    """The mode and main_ppo's overrides. `job`: what a submitting launcher resolved (the cluster side of a Ray
    job): its overrides are used as they are, nothing is looked up again."""
    environ = os.environ if environ is None else environ
    if job is not None:
        return Launch(knobs, TRAIN, list(user_overrides), list(job["overrides"]), cluster=True, job=True,
                      python=sys.executable, ray_address=environ.get("RAY_ADDRESS", ""))
    if knobs.print_output_dir == "1":  # for scripts/eval_gsm8k.sh and the SLURM batch script
        mode = PRINT_OUTPUT_DIR
    elif knobs.check_only == "1":
        mode = CHECK_ONLY
    elif knobs.dry_run == "1":
        mode = DRY_RUN
    elif knobs.submit == "ray":
        mode = SUBMIT
    else:
        mode = TRAIN
    # a Ray job runs in Ray's unpacked copy of the repo on every node: it gets repo-relative paths
    root = "." if knobs.submit == "ray" else REPO_ROOT
    overrides = [*launch_overrides(knobs, root), *user_overrides]
    # RAY_ADDRESS=local (scripts/cpu_env.sh) asks for a fresh Ray of main_ppo's own, as no RAY_ADDRESS does
    cluster = knobs.submit == "ray" or environ.get("RAY_ADDRESS", "local") not in ("", "local")
    return Launch(knobs, mode, list(user_overrides), overrides, cluster=cluster, python=knobs.python,
                  ray_address=environ.get("RAY_ADDRESS", ""))


def check_launch(launch: Launch, out=None, environ: dict | None = None):
    """Run the preflight for this launch, in this process, and complete the plan from what it found: the trace
    budget's overrides, the relays, and (on a cluster) the Ray sizes dropped. Returns the Preflight; see its `ok`."""
    from recipes.preflight.run import PreflightInputs, run_preflight

    environ = os.environ if environ is None else environ
    knobs = launch.knobs
    inputs = PreflightInputs(launch=launch.mode in (TRAIN, CHECK_ONLY), submit=launch.mode == SUBMIT,
                             dry_run=launch.mode == DRY_RUN,
                             traces_offline=knobs.traces_kept_offline, gpu_memory_gb=knobs.gpu_memory,
                             # a job got the budget's overrides from its submitter
                             trace_gb_per_day=None if launch.job else knobs.trace_budget)
    preflight = run_preflight(launch.overrides, inputs, out=out or sys.stderr)
    if preflight.config is None:
        return preflight
    launch.overrides += preflight.overrides
    launch.config, launch.facts = preflight.config, preflight.facts
    launch.relay = relay_plan(knobs, preflight.config, launch.cluster, environ)
    if launch.cluster:
        sizing = [key for key in CLUSTER_SIZING
                  if OmegaConf.select(preflight.config, f"ray_kwargs.ray_init.{key}") is not None]
        if sizing and not launch.job:  # a job got them from its submitter
            launch.overrides += [f"ray_kwargs.ray_init.{key}=null" for key in sizing]
            launch.notes.append(f"joining a running Ray cluster: ray_kwargs.ray_init.{{{','.join(sizing)}}} "
                                "dropped (the cluster has its own sizes)")
    return preflight


def traces_volume_line(launch: Launch) -> str | None:
    """What the run traces a step and what that weighs (the plan's tracing row), said once by a launch."""
    if launch.facts is None or launch.facts.trace is None:
        return None
    from recipes.tracing.volume import describe

    return describe(launch.facts.trace)


def dry_run_lines(launch: Launch, problems: int = 0) -> list[str]:
    """What DRY_RUN=1 prints (stdout): the plan, the side processes, and last the main_ppo command; `problems`: the
    preflight's, which the first line names."""
    submitted = launch.mode == SUBMIT or launch.knobs.submit == "ray"
    verdict = (f"the preflight found {problems} problem(s) (above) that stop a launch, nothing started; fixed, "
               if problems else "preflight passed, nothing started; ")
    lines = [f"# DRY_RUN=1: {verdict}the launch would run (profile "
             f"{launch.knobs.profile}{', submitted as a Ray job' if submitted else ''}):",
             *plan_lines(launch.facts, launch.config_file, launch.overrides)]
    if submitted:
        from recipes.launch.ray_job import ENTRYPOINT

        lines.append(f"# submitted to the Ray cluster at {launch.ray_address or '$RAY_ADDRESS'} as a job whose "
                     f"entrypoint is `{ENTRYPOINT}`, which runs on the cluster:")
    watcher = launch.watcher_command()
    if watcher:
        lines.append(f"# and beside it: {shlex.join(watcher)}")
    if launch.relay:
        lines.append(f"# traces through {launch.relay.describe(launch.python)}")
    lines.append(shlex.join(launch.main_ppo_command()))
    return lines


def traces_line(launch: Launch) -> str | None:
    """Where the traces can be opened and how they get there, said once per launch; None when nothing traces."""
    if not launch.traces:
        return None
    from recipes.tracing.location import weave_project_url, where_traces_go

    relay = launch.relay
    mode = "off" if relay is None else ("offline" if relay.offline else "auto")
    return where_traces_go(weave_project_url(launch.config.trainer.project_name),
                           launch.config.trainer.experiment_name, mode, relay and relay.spool,
                           every_node=bool(relay and relay.cluster))


def dry_run_config_file(launch: Launch) -> str:
    """Where DRY_RUN writes the composed config: DRY_RUN_CONFIG, else a new file in $TMPDIR."""
    if launch.knobs.dry_run_config:
        return launch.knobs.dry_run_config
    import tempfile

    fd, path = tempfile.mkstemp(suffix=".yaml", prefix=f"{launch.knobs.experiment_name}_config.",
                                dir=os.environ.get("TMPDIR") or "/tmp")
    os.close(fd)
    return str(Path(path))
