"""The launcher's knobs, declared once here with their defaults and meanings, and the hydra overrides they become.

A knob is an environment variable (`PROFILE=4gpu bash scripts/run_gsm8k_grpo.sh`). Each is a field of `Knobs`
below, named as the variable in lower case and declared with `knob(default, meaning)`: the one home of its default
and of what it does. The launcher reads them through `Knobs.from_environ` and hands what the checks need on as
values (nothing else reads a knob from the environment); `--help` of the launch scripts lists them from here
(`python -m recipes.launch.knobs`, which needs nothing beyond Python's own library, so it runs before an env
exists). A knob left empty means the same as a knob unset. EXPERIMENT_NAME, OUTPUT_DIR and PYTHON, empty, are
derived when a `Knobs` is made. Everything else that needs "the config as the launcher composes it"
(scripts/harness/agent_loop_inprocess.py, the benchmarks, the tests) builds `Knobs` and calls `launch_overrides`
here instead of restating the mapping.
"""

from __future__ import annotations

import os
import sys
import textwrap
from dataclasses import asdict, dataclass, field, fields
from functools import cached_property
from pathlib import Path

from recipes.constants import AGENT_LOOP_CONFIG, CONFIG_DIR, CONFIG_NAME, PROFILE_DIR, REPO_ROOT, TOOL_CONFIG_DIR

TRACE_CHOICES = ("", "on", "off")
TRACE_RELAY_CHOICES = ("auto", "offline", "off")
SUBMIT_CHOICES = ("", "ray")
STALL_ACTIONS = ("stop", "report")


def knob(default: str, meaning: str):
    """A knob's declaration: its default (as `${VAR:-default}` would give it) and what it does (its --help line)."""
    return field(default=default, metadata={"meaning": meaning})


class KnobError(ValueError):
    """A knob value the launch cannot use; the message is the one line the user sees."""


@dataclass(frozen=True)
class Knobs:
    """One launch's knobs, with their defaults and meanings."""

    profile: str = knob("8xh100", "config/profile/<PROFILE>.yaml")
    data_dir: str = knob("~/data/gsm8k", "where python data_prep/gsm8k.py writes")
    tool_set: str = knob("calculator", "config/tool_config/<TOOL_SET>.yaml, or none (as in the data prep)")
    model_path: str = knob("", "empty: the profile's model")
    n_gpus_per_node: str = knob("", "empty: the profile's")
    nnodes: str = knob("", "empty: the profile's")
    gpu_memory_gb: str = knob("", "the memory plan's GPU where nvidia-smi does not answer (planning for another node); "
                                  "empty: the card the profile is for (its recipe.gpu_memory_gb)")
    trace: str = knob("", "on | off; empty: the profile's (on, except smoke tests)")
    trace_gb_per_day: str = knob("", "e.g. 2: trace the whole GRPO groups a step that fit this many GB of traces a day "
                                     "(at least one; docs/tracing.md); empty: the config's rate (1 prompt per "
                                     "agent-loop worker)")
    logger: str = knob("", "e.g. console or console,wandb; empty: the profile's")
    experiment_name: str = knob("", "empty: gsm8k_<TOOL_SET>_<model>_<PROFILE>, <model> being the model's name (its "
                                    "hub id's or folder's last part)")
    output_dir: str = knob("", "checkpoints, dumps; multi-node: shared storage; empty: outputs/<EXPERIMENT_NAME> in "
                               "this repo")
    publish_evals: str = knob("0", "1: publish each validation to Weave as an Evaluation while training")
    trace_relay: str = knob("auto", "auto: traces go through a relay on each node that keeps them on disk until W&B "
                                    "has them; offline: air-gapped, keep them for gsm8k-upload-traces; off: "
                                    "workers send straight to W&B")
    trace_spool: str = knob("", "where each node's relay keeps traces, on that node's own disk; empty: "
                                "$OUTPUT_DIR/trace_spool on one node (if only you can write it), else "
                                "/var/tmp/gsm8k_recipe_traces-<uid>/$EXPERIMENT_NAME[/<node> on a Ray cluster]")
    python: str = knob("", "the Python of the launcher and main_ppo; empty: the launcher's, which "
                           "scripts/run_gsm8k_grpo.sh picks: an active venv, else the project's env (.venv-gpu, else "
                           ".venv; .venv for cpu_* profiles)")
    dry_run: str = knob("0", "1: preflight, print the plan, write the composed config; start nothing")
    dry_run_config: str = knob("", "where DRY_RUN writes the config; empty: a new file in $TMPDIR")
    submit: str = knob("", "ray: submit as a Ray job to RAY_ADDRESS (submit_multinode.sh)")
    check_only: str = knob("0", "1: the launch preflight, a line per GPU-node check; start nothing")
    print_output_dir: str = knob("0", "1: print OUTPUT_DIR as this launch resolves it and exit (what eval_gsm8k.sh "
                                      "and the SLURM batch script ask)")
    stall_minutes: str = knob("", "minutes with no step, validation or checkpoint before the watchdog reports (stacks "
                                  "of every process) and acts; empty: 4x the slowest step, at least 20 (3x that "
                                  "before the first step); 0: off")
    stall_action: str = knob("stop", "stop: stop the run at once, exit 124; report: report, go on")
    stop_wait_minutes: str = knob("15", "SIGTERM, SIGINT or SIGUSR1: finish the step, save it, exit 75 (resume: the "
                                        "same command); a second signal or no step end within this many minutes "
                                        "stops at once; 0: always at once")

    def __post_init__(self) -> None:
        """Resolved once, here: `~` expanded, the experiment named gsm8k_<tool set>_<model>_<profile> and its
        outputs in outputs/<experiment> of the repo unless given, main_ppo run by this Python unless another is."""
        from recipes.export.provenance import model_label

        experiment = self.experiment_name or \
            f"gsm8k_{self.tool_set}_{model_label(self.model_path or profile_model(self.profile))}_{self.profile}"
        object.__setattr__(self, "data_dir", os.path.expanduser(self.data_dir))
        object.__setattr__(self, "experiment_name", experiment)
        object.__setattr__(self, "output_dir", self.output_dir or str(REPO_ROOT / "outputs" / experiment))
        object.__setattr__(self, "python", self.python or sys.executable)

    @classmethod
    def names(cls) -> list[str]:
        """The environment variables, as the scripts name them."""
        return [f.name.upper() for f in fields(cls)]

    @classmethod
    def from_environ(cls, environ: dict[str, str] | None = None) -> Knobs:
        """The knobs a shell environment sets (unset or empty: the default)."""
        environ = os.environ if environ is None else environ
        return cls(**{f.name: environ[f.name.upper()] for f in fields(cls) if environ.get(f.name.upper())})

    def as_environ(self) -> dict[str, str]:
        return {name.upper(): value for name, value in asdict(self).items()}

    @property
    def stop_wait_s(self) -> float:
        """How long a stop waits for the step in progress to end and save (0: it stops at once)."""
        return float(self.stop_wait_minutes) * 60

    @property
    def traces_kept_offline(self) -> bool:
        return self.trace_relay == "offline"

    @property
    def gpu_memory(self) -> float | None:
        """GPU_MEMORY_GB in GB (None: unset)."""
        return float(self.gpu_memory_gb) if self.gpu_memory_gb else None

    @cached_property
    def trace_budget(self) -> float | None:
        """TRACE_GB_PER_DAY in GB a day (None: unset), read once; KnobError for a value that is not a budget."""
        if not self.trace_gb_per_day:
            return None
        from recipes.preflight.trace_budget import parse_budget
        from recipes.tracing.volume import TraceBudgetError

        try:
            return parse_budget(self.trace_gb_per_day)
        except TraceBudgetError as err:
            raise KnobError(str(err)) from None

    def check(self, environ: dict[str, str] | None = None) -> None:
        """Raise KnobError, with the line to show, for a value the launch cannot use."""
        from recipes.gsm8k.tool_sets import NO_TOOLS

        environ = os.environ if environ is None else environ
        if not (PROFILE_DIR / f"{self.profile}.yaml").is_file():
            raise KnobError(f"unknown PROFILE={self.profile}; choose one of: {' '.join(launch_profiles())} (and "
                            f"{', '.join(f'{p} for {s}' for p, s in check_profiles().items())})")
        script = check_profiles().get(self.profile)
        gives, given = CHECK_GIVES.get(script, ("what its check script gives it", lambda knobs, environ: True))
        if script and not given(self, environ):
            raise KnobError(f"PROFILE={self.profile} is {script}'s (it gives the profile {gives}), not a launch "
                            f"profile: run bash {script}; to launch, one of: {' '.join(launch_profiles())}")
        if self.tool_set != NO_TOOLS and not (TOOL_CONFIG_DIR / f"{self.tool_set}.yaml").is_file():
            raise KnobError(f"unknown TOOL_SET={self.tool_set}; choose one of: "
                            f"{' '.join(_stems(TOOL_CONFIG_DIR))} {NO_TOOLS}")
        if self.trace not in TRACE_CHOICES:
            raise KnobError(f"TRACE must be on or off, not '{self.trace}'")
        if self.trace == "off" and self.trace_gb_per_day:
            raise KnobError(f"TRACE=off and TRACE_GB_PER_DAY={self.trace_gb_per_day} contradict each other: leave "
                            "TRACE_GB_PER_DAY unset to trace nothing, or set TRACE=on to trace within the budget")
        if self.gpu_memory_gb and not _positive_number(self.gpu_memory_gb):
            raise KnobError(f"GPU_MEMORY_GB must be a GPU's memory in GB (e.g. 24, 40, 80), not "
                            f"'{self.gpu_memory_gb}'")
        _ = self.trace_budget  # read once, here: a budget that is no number stops the launch before anything
        if self.trace_relay not in TRACE_RELAY_CHOICES:
            raise KnobError(f"TRACE_RELAY must be auto, off or offline, not '{self.trace_relay}'")
        if self.traces_kept_offline and not environ.get("WANDB_ENTITY"):
            raise KnobError("TRACE_RELAY=offline needs WANDB_ENTITY=<the W&B entity the traces will be uploaded to>")
        if self.submit not in SUBMIT_CHOICES:
            raise KnobError(f"SUBMIT must be ray or empty, not '{self.submit}'")
        if self.stall_minutes and not _non_negative_number(self.stall_minutes):
            raise KnobError(f"STALL_MINUTES must be a number of minutes (0: no watchdog; empty: derived from the "
                            f"steps), not '{self.stall_minutes}'")
        if not _non_negative_number(self.stop_wait_minutes):
            raise KnobError(f"STOP_WAIT_MINUTES must be a number of minutes (0: a signal stops at once, no "
                            f"checkpoint), not '{self.stop_wait_minutes}'")
        if self.stall_action not in STALL_ACTIONS:
            raise KnobError(f"STALL_ACTION must be stop or report, not '{self.stall_action}'")


def help_lines(leave_out: tuple[str, ...] = ()) -> list[str]:
    """The knobs as --help lists them: `  NAME=${NAME:-default}  # meaning`, the meaning wrapped at 120 columns."""
    lines = []
    for f in fields(Knobs):
        name = f.name.upper()
        if name in leave_out:
            continue
        head = f"  {name}=${{{name}:-{f.default}}}"
        column = max(len(head) + 1, 51)
        text = textwrap.wrap(f.metadata["meaning"], width=120 - column - 2)
        lines.append(f"{head:<{column}}# {text[0]}")
        lines += [f"{'':<{column}}# {more}" for more in text[1:]]
    return lines


def launch_overrides(knobs: Knobs, root: str | Path = REPO_ROOT) -> list[str]:
    """The hydra overrides a launch with these knobs passes to main_ppo, before the user's own. `root`: where the
    recipe's files are as main_ppo will see them ("." for a Ray job, which runs in Ray's copy of the repo)."""
    from recipes.gsm8k.tool_sets import NO_TOOLS, TOOL_SETS

    root = str(root)
    tool_config = "null" if knobs.tool_set == NO_TOOLS else f"{root}/config/tool_config/{knobs.tool_set}.yaml"
    tool_set = TOOL_SETS.get(knobs.tool_set)
    functions = tool_set.function_tool_path if tool_set else None
    out = knobs.output_dir
    overrides = [
        f"profile={knobs.profile}",
        f"data.train_files={knobs.data_dir}/train.parquet",
        f"data.val_files={knobs.data_dir}/test.parquet",
        f"actor_rollout_ref.rollout.multi_turn.tool_config_path={tool_config}",
        f"actor_rollout_ref.rollout.agent.agent_loop_config_path={root}/config/{AGENT_LOOP_CONFIG.name}",
        f"reward.custom_reward_function.path={root}/recipes/gsm8k/reward.py",
        f"trainer.experiment_name={knobs.experiment_name}",
        f"trainer.default_local_dir={out}/checkpoints",
        f"trainer.rollout_data_dir={out}/rollouts",
        f"trainer.validation_data_dir={out}/validation",
        f"hydra.run.dir={out}/hydra/${{now:%Y-%m-%d_%H-%M-%S}}",  # hydra's log and composed config, not ./outputs/
    ]
    optional = {"actor_rollout_ref.rollout.multi_turn.function_tool_path": functions and f"{root}/{functions}",
                "actor_rollout_ref.model.path": knobs.model_path, "trainer.n_gpus_per_node": knobs.n_gpus_per_node,
                "trainer.nnodes": knobs.nnodes, "trainer.logger": knobs.logger and f"[{knobs.logger}]"}
    overrides += [f"{key}={value}" for key, value in optional.items() if value]
    if knobs.trace:
        overrides.append(f"actor_rollout_ref.rollout.trace.backend={'weave' if knobs.trace == 'on' else 'null'}")
    return overrides


def _positive_number(text: str) -> bool:
    return _non_negative_number(text) and float(text) > 0


def _non_negative_number(text: str) -> bool:
    try:
        value = float(text)
    except ValueError:
        return False
    return value >= 0 and value != float("inf")


def profile_model(profile: str) -> str:
    """The model a profile trains: its own actor_rollout_ref.model.path, else that of a profile it builds on (its
    defaults list, the last one that sets it), else the recipe's. Read from the YAML files, nothing composed."""
    import yaml

    path = PROFILE_DIR / f"{profile}.yaml"
    data = yaml.safe_load(path.read_text()) if path.is_file() else None
    if not isinstance(data, dict):
        data = {}
    own = ((data.get("actor_rollout_ref") or {}).get("model") or {}).get("path")
    if own:
        return str(own)
    for parent in reversed([d for d in data.get("defaults") or [] if isinstance(d, str) and d != "_self_"]):
        if (PROFILE_DIR / f"{parent}.yaml").is_file() and parent != profile:
            found = profile_model(parent)
            if found != _recipe_model():
                return found
    return _recipe_model()


def _recipe_model() -> str:
    import yaml

    recipe = yaml.safe_load((CONFIG_DIR / f"{CONFIG_NAME}.yaml").read_text())
    return str(recipe["actor_rollout_ref"]["model"]["path"])


def _stems(folder: Path) -> list[str]:
    return sorted(p.stem for p in folder.glob("*.yaml"))


def _on_the_cpu_platform(knobs: Knobs, environ) -> bool:
    return environ.get("VERL_PLATFORM") == "cpu"  # scripts/cpu_env.sh, which those scripts source


def _with_its_model(knobs: Knobs, environ) -> bool:
    return bool(knobs.model_path)


# What each check script gives the profile it runs (recipe.run_by), which a launch by hand lacks: in words, and
# whether this launch has it
CHECK_GIVES = {"scripts/smoke_cpu.sh": ("verl's CPU platform (VERL_PLATFORM=cpu) and its tiny model",
                                        _on_the_cpu_platform),
               "scripts/learn_cpu.sh": ("verl's CPU platform (VERL_PLATFORM=cpu) and its small model",
                                        _on_the_cpu_platform),
               "scripts/learn_gpu.sh": ("its small model (MODEL_PATH)", _with_its_model)}


def check_profiles() -> dict[str, str]:
    """{profile: the script that runs it} for the profiles of the check scripts (their recipe.run_by)."""
    import yaml

    found = {}
    for path in sorted(PROFILE_DIR.glob("*.yaml")):
        recipe = (yaml.safe_load(path.read_text()) or {}).get("recipe") or {}
        if recipe.get("run_by"):
            found[path.stem] = str(recipe["run_by"])
    return found


def launch_profiles() -> list[str]:
    """The profiles a launch offers: every one but the check scripts'."""
    return [p for p in _stems(PROFILE_DIR) if p not in check_profiles()]


def compose_launch_config(knobs: Knobs | None = None, overrides: tuple[str, ...] | list[str] = ()):
    """The config main_ppo gets from a launch with these knobs, then the user's hydra overrides (composed by the
    preflight's composer; not validated). Knobs() is a default launch: PROFILE=8xh100, the calculator."""
    from recipes.preflight.compose import compose_config

    return compose_config([*launch_overrides(knobs or Knobs()), *overrides])


if __name__ == "__main__":  # --help of the launch scripts: the knobs, less those a wrapper sets itself
    print("\n".join(help_lines(tuple(sys.argv[1:]))))
