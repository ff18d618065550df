"""Drive the launcher through its Python entry point (recipes/launch), as scripts/run_gsm8k_grpo.sh hands it the
knobs, and read its decisions: the mode, main_ppo's overrides and command, the relays, the composed config. No
stand-in: the real knob mapping, preflight and plan, in this process. `run_script` runs a script of scripts/ as
users do, in a subprocess, for the few end-to-end tests of the shell front."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from unittest import mock

from recipes.constants import REPO_ROOT
from recipes.launch.decision import Launch, check_launch, plan_launch
from recipes.launch.knobs import Knobs
from recipes.launch.plan import plan_rows
from recipes.preflight.run import Preflight

SCRIPTS = REPO_ROOT / "scripts"
# A dry run checks the W&B credentials a launch needs: its W&B key here, a stand-in's (no call reaches W&B from a dry
# run). A test of the missing key passes WANDB_API_KEY="".
STAND_IN_WANDB_KEY = "stand-in-key-for-dry-runs-0000000000000000"
# what a user's shell might carry that would change what the launcher does: the knobs, and these
_CLEARED = ("WANDB_API_KEY", "WANDB_ENTITY", "PREFLIGHT_", "RAY_ADDRESS", "VERL_PLATFORM", "PRINT_OUTPUT_DIR",
            "CUDA_VISIBLE_DEVICES")


def clean_environ(**env: str) -> dict[str, str]:
    kept = {k: v for k, v in os.environ.items() if k not in Knobs.names() and not k.startswith(_CLEARED)}
    return {**kept, **env}


@dataclass
class Planned:
    """What the launcher decided, and what its preflight said (stderr)."""

    launch: Launch
    preflight: Preflight
    err: str

    @property
    def overrides(self) -> dict[str, str]:
        return override_dict(self.launch.overrides)

    def row(self, key: str) -> str:
        """A row of the plan DRY_RUN prints (model, data, tools, hardware, batch, ...)."""
        return dict(plan_rows(self.launch.facts, self.launch.config_file, self.launch.overrides))[key]


def plan(data_dir, *overrides: str, **env: str) -> Planned:
    """The launcher's decisions for these knobs and environment (as a shell would set them) and hydra overrides, in
    this process; os.environ is the given environment meanwhile (the preflight's checks read it). A knob the launch
    refuses raises recipes.launch.knobs.KnobError."""
    environ = clean_environ(**{"PYTHON": sys.executable, "DATA_DIR": str(data_dir), **_dry_run_key(env), **env})
    with mock.patch.dict(os.environ, environ, clear=True):
        knobs = Knobs.from_environ(environ)
        launch = plan_launch(knobs, list(overrides), environ)
        launch.knobs.check(environ)
        err = io.StringIO()
        preflight = check_launch(launch, out=err, environ=environ)
    return Planned(launch, preflight, err.getvalue())


def _dry_run_key(env: dict) -> dict[str, str]:
    return {"WANDB_API_KEY": STAND_IN_WANDB_KEY} if env.get("DRY_RUN") == "1" else {}


def override_dict(overrides: list[str]) -> dict[str, str]:
    return dict(o.lstrip("+").split("=", 1) for o in overrides)


def run_script(script: str, data_dir, *args, timeout: int = 180, **env) -> subprocess.CompletedProcess:
    full_env = clean_environ(**{"PYTHON": sys.executable, "DATA_DIR": str(data_dir), **_dry_run_key(env), **env})
    return subprocess.run(["bash", str(SCRIPTS / script), *args], env=full_env, capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


def written_config(path: str | Path) -> str:
    return Path(path).read_text()
