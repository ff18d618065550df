"""The launcher's knobs and the hydra overrides they become: the one home of that mapping.

scripts/run_gsm8k_grpo.sh lists the knobs as users set them: its `VAR=${VAR:-default}` lines are the one home of
their defaults (what `--help` prints), read here from the script itself, and it hands them to
`python -m recipes.launch` in its environment. The two derived knobs, EXPERIMENT_NAME and OUTPUT_DIR (empty there),
are derived here only, when a `Knobs` is made. Everything else that needs "the config as the launcher composes it"
(scripts/harness/agent_loop_inprocess.py, the benchmarks, the tests) builds `Knobs` and calls `launch_overrides`
here instead of restating the mapping. A knob left empty means the same as a knob unset, as `${VAR:-default}` reads
it.
"""

from __future__ import annotations

import os
import re
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import yaml

from recipes.constants import AGENT_LOOP_CONFIG, CONFIG_DIR, CONFIG_NAME, PROFILE_DIR, REPO_ROOT, TOOL_CONFIG_DIR
from recipes.export.provenance import model_label
from recipes.gsm8k.tool_sets import NO_TOOLS

LAUNCH_SCRIPT = REPO_ROOT / "scripts" / "run_gsm8k_grpo.sh"
TRACE_CHOICES = ("", "on", "off")
TRACE_RELAY_CHOICES = ("auto", "offline", "off")
SUBMIT_CHOICES = ("", "ray")
STALL_ACTIONS = ("stop", "report")


def script_defaults(script: Path = LAUNCH_SCRIPT) -> dict[str, str]:
    """{NAME: default} from the script's `NAME=${NAME:-default}` lines, `$HOME` and `~` expanded as bash would."""
    found = re.findall(r"^([A-Z][A-Z0-9_]*)=\$\{\1:-([^}]*)\}", script.read_text(), re.M)
    return {name: os.path.expanduser(os.path.expandvars(value)) for name, value in found}


_DEFAULTS = script_defaults()


class KnobError(ValueError):
    """A knob value the launch cannot use; the message is the one line the user sees."""


@dataclass(frozen=True)
class Knobs:
    """One launch's knobs, named as the script's variables in lower case, with the script's defaults. An empty
    experiment_name or output_dir is derived when the Knobs is made (__post_init__)."""

    profile: str = _DEFAULTS["PROFILE"]
    data_dir: str = _DEFAULTS["DATA_DIR"]
    tool_set: str = _DEFAULTS["TOOL_SET"]
    model_path: str = _DEFAULTS["MODEL_PATH"]
    n_gpus_per_node: str = _DEFAULTS["N_GPUS_PER_NODE"]
    nnodes: str = _DEFAULTS["NNODES"]
    gpu_memory_gb: str = _DEFAULTS["GPU_MEMORY_GB"]
    trace: str = _DEFAULTS["TRACE"]
    trace_gb_per_day: str = _DEFAULTS["TRACE_GB_PER_DAY"]
    logger: str = _DEFAULTS["LOGGER"]
    experiment_name: str = _DEFAULTS["EXPERIMENT_NAME"]
    output_dir: str = _DEFAULTS["OUTPUT_DIR"]
    publish_evals: str = _DEFAULTS["PUBLISH_EVALS"]
    trace_relay: str = _DEFAULTS["TRACE_RELAY"]
    trace_spool: str = _DEFAULTS["TRACE_SPOOL"]
    python: str = _DEFAULTS["PYTHON"]
    dry_run: str = _DEFAULTS["DRY_RUN"]
    dry_run_config: str = _DEFAULTS["DRY_RUN_CONFIG"]
    submit: str = _DEFAULTS["SUBMIT"]
    check_only: str = _DEFAULTS["CHECK_ONLY"]
    stall_minutes: str = _DEFAULTS["STALL_MINUTES"]
    stall_action: str = _DEFAULTS["STALL_ACTION"]
    stop_wait_minutes: str = _DEFAULTS["STOP_WAIT_MINUTES"]

    def __post_init__(self) -> None:
        """Resolved once, here: `~` expanded, the experiment named gsm8k_<tool set>_<model>_<profile> and its
        outputs in outputs/<experiment> of the repo unless given."""
        experiment = self.experiment_name or \
            f"gsm8k_{self.tool_set}_{model_label(self.model_path or profile_model(self.profile))}_{self.profile}"
        object.__setattr__(self, "data_dir", os.path.expanduser(self.data_dir))
        object.__setattr__(self, "experiment_name", experiment)
        object.__setattr__(self, "output_dir", self.output_dir or str(REPO_ROOT / "outputs" / experiment))

    @classmethod
    def names(cls) -> list[str]:
        """The environment variables, as the script names them."""
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

    def check(self, environ: dict[str, str] | None = None) -> None:
        """Raise KnobError, with the line to show, for a value the launch cannot use."""
        environ = os.environ if environ is None else environ
        if not (PROFILE_DIR / f"{self.profile}.yaml").is_file():
            raise KnobError(f"unknown PROFILE={self.profile}; choose one of: {' '.join(_stems(PROFILE_DIR))}")
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
        if self.trace_gb_per_day:
            from recipes.launch.trace_budget import parse_budget
            from recipes.tracing.volume import TraceBudgetError

            try:
                parse_budget(self.trace_gb_per_day)
            except TraceBudgetError as err:
                raise KnobError(str(err)) from None
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


def launch_overrides(knobs: Knobs, root: str | Path = REPO_ROOT) -> list[str]:
    """The hydra overrides a launch with these knobs passes to main_ppo, before the user's own. `root`: where the
    recipe's files are as main_ppo will see them ("." for a Ray job, which runs in Ray's copy of the repo)."""
    root = str(root)
    tool_config = "null" if knobs.tool_set == NO_TOOLS else f"{root}/config/tool_config/{knobs.tool_set}.yaml"
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
    optional = {"actor_rollout_ref.model.path": knobs.model_path, "trainer.n_gpus_per_node": knobs.n_gpus_per_node,
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
    recipe = yaml.safe_load((CONFIG_DIR / f"{CONFIG_NAME}.yaml").read_text())
    return str(recipe["actor_rollout_ref"]["model"]["path"])


def _stems(folder: Path) -> list[str]:
    return sorted(p.stem for p in folder.glob("*.yaml"))


def compose_launch_config(knobs: Knobs | None = None, overrides: tuple[str, ...] | list[str] = ()):
    """The config main_ppo gets from a launch with these knobs, then the user's hydra overrides (composed by the
    preflight's composer; not validated). Knobs() is a default launch: PROFILE=8xh100, the calculator."""
    from recipes.preflight.compose import compose_config

    return compose_config([*launch_overrides(knobs or Knobs()), *overrides])
