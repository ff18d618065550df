"""The launcher's knobs and the hydra overrides they become: the one home of that mapping.

scripts/run_gsm8k_grpo.sh lists the knobs as users set them (`VAR=${VAR:-default}` lines, what `--help` prints)
and hands them to `python -m recipes.launch` in its environment. Everything else that needs "the config as the
launcher composes it" (recipes/agent_loop_inprocess.py, the benchmarks, the tests) builds `Knobs` and calls
`launch_overrides` here instead of restating the mapping. The defaults below are the script's (a test holds
the two equal); a knob left empty means the same as a knob unset, as `${VAR:-default}` reads it.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path

from recipes.constants import AGENT_LOOP_CONFIG, PROFILE_DIR, REPO_ROOT, TOOL_CONFIG_DIR
from recipes.tool_sets import NO_TOOLS

TRACE_CHOICES = ("", "on", "off")
TRACE_RELAY_CHOICES = ("auto", "offline", "off")
SUBMIT_CHOICES = ("", "ray")
STALL_ACTIONS = ("stop", "report")


class KnobError(ValueError):
    """A knob value the launch cannot use; the message is the one line the user sees."""


@dataclass(frozen=True)
class Knobs:
    """One launch's knobs, named as the script's variables in lower case. Empty experiment_name and output_dir
    are derived (`resolved()`), as the script derives them."""

    profile: str = "8xh100"
    data_dir: str = "~/data/gsm8k"
    tool_set: str = "calculator"
    model_path: str = ""
    n_gpus_per_node: str = ""
    nnodes: str = ""
    trace: str = ""
    logger: str = ""
    experiment_name: str = ""
    output_dir: str = ""
    publish_evals: str = "0"
    trace_relay: str = "auto"
    trace_spool: str = ""
    python: str = "python3"
    dry_run: str = "0"
    dry_run_config: str = ""
    submit: str = ""
    check_only: str = "0"
    stall_minutes: str = ""  # empty: derived from the steps so far (recipes/watchdog/clock.py); 0: no watchdog
    stall_action: str = "stop"

    @classmethod
    def names(cls) -> list[str]:
        """The environment variables, as the script names them."""
        return [f.name.upper() for f in fields(cls)]

    @classmethod
    def from_environ(cls, environ: dict[str, str] | None = None) -> Knobs:
        """The knobs a shell environment sets (unset or empty: the default), resolved."""
        environ = os.environ if environ is None else environ
        given = {f.name: environ[f.name.upper()] for f in fields(cls) if environ.get(f.name.upper())}
        return cls(**given).resolved()

    def resolved(self) -> Knobs:
        """Derived defaults filled in (experiment name, output dir) and `~` expanded, once, here."""
        experiment = self.experiment_name or f"gsm8k_{self.tool_set}_{self.profile}"
        return replace(self, data_dir=os.path.expanduser(self.data_dir), experiment_name=experiment,
                       output_dir=self.output_dir or str(REPO_ROOT / "outputs" / experiment))

    def as_environ(self) -> dict[str, str]:
        return {name.upper(): value for name, value in asdict(self).items()}

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
        if self.trace_relay not in TRACE_RELAY_CHOICES:
            raise KnobError(f"TRACE_RELAY must be auto, off or offline, not '{self.trace_relay}'")
        if self.traces_kept_offline and not environ.get("WANDB_ENTITY"):
            raise KnobError("TRACE_RELAY=offline needs WANDB_ENTITY=<the W&B entity the traces will be uploaded to>")
        if self.submit not in SUBMIT_CHOICES:
            raise KnobError(f"SUBMIT must be ray or empty, not '{self.submit}'")
        if self.stall_minutes and not _non_negative_number(self.stall_minutes):
            raise KnobError(f"STALL_MINUTES must be a number of minutes (0: no watchdog; empty: derived from the "
                            f"steps), not '{self.stall_minutes}'")
        if self.stall_action not in STALL_ACTIONS:
            raise KnobError(f"STALL_ACTION must be stop or report, not '{self.stall_action}'")


def launch_overrides(knobs: Knobs, root: str | Path = REPO_ROOT) -> list[str]:
    """The hydra overrides a launch with these knobs passes to main_ppo, before the user's own. `root`: where the
    recipe's files are as main_ppo will see them ("." for a Ray job, which runs in Ray's copy of the repo)."""
    knobs = knobs.resolved()
    root = str(root)
    tool_config = "null" if knobs.tool_set == NO_TOOLS else f"{root}/config/tool_config/{knobs.tool_set}.yaml"
    out = knobs.output_dir
    overrides = [
        f"profile={knobs.profile}",
        f"data.train_files={knobs.data_dir}/train.parquet",
        f"data.val_files={knobs.data_dir}/test.parquet",
        f"actor_rollout_ref.rollout.multi_turn.tool_config_path={tool_config}",
        f"actor_rollout_ref.rollout.agent.agent_loop_config_path={root}/config/{AGENT_LOOP_CONFIG.name}",
        f"reward.custom_reward_function.path={root}/recipes/reward.py",
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


def _non_negative_number(text: str) -> bool:
    try:
        value = float(text)
    except ValueError:
        return False
    return value >= 0 and value != float("inf")


def _stems(folder: Path) -> list[str]:
    return sorted(p.stem for p in folder.glob("*.yaml"))


def compose_launch_config(knobs: Knobs | None = None, overrides: tuple[str, ...] | list[str] = ()):
    """The config main_ppo gets from a launch with these knobs, then the user's hydra overrides (composed by the
    preflight's composer; not validated). Knobs() is a default launch: PROFILE=8xh100, the calculator."""
    from recipes.preflight.compose import compose_config

    return compose_config([*launch_overrides(knobs or Knobs()), *overrides])
