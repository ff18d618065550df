"""The probe's measured step, written where the plan's time row reads a profile's step time: its YAML's
`recipe.step_time` (for 8xh100, which changes nothing, the recipe's own in config/gsm8k_multiturn_grpo.yaml). The
estimate there is replaced by the measurement and says so; every other line of the file stays as it is."""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path

from recipes.constants import CONFIG_DIR, CONFIG_NAME

STEP_TIME = re.compile(r"^  step_time: .*$", re.M)
RECIPE = re.compile(r"^recipe:[ \t]*(#.*)?$", re.M)
REFERENCE_PROFILE = "8xh100"  # the recipe's own values: its step time is the recipe's


def step_time_line(seconds: float, model: str | None, source: str) -> str:
    quoted = source.replace("\\", "\\\\").replace('"', '\\"')
    return f'  step_time: {{seconds: [{seconds:.1f}, {seconds:.1f}], model: {model or "null"}, source: "{quoted}"}}'


def record_step_time(profile: str, seconds: float, model: str | None, source: str,
                     config_dir: Path = CONFIG_DIR) -> Path:
    """Replace the profile's step time with a measured one; returns the file written (atomically)."""
    path = Path(config_dir) / "profile" / f"{profile}.yaml"
    if profile == REFERENCE_PROFILE and not STEP_TIME.search(path.read_text()):
        path = Path(config_dir) / f"{CONFIG_NAME}.yaml"
    text, line = path.read_text(), step_time_line(seconds, model, source)
    if STEP_TIME.search(text):
        text = STEP_TIME.sub(lambda _: line, text, count=1)
    elif RECIPE.search(text):
        text = RECIPE.sub(lambda found: f"{found.group(0)}\n{line}", text, count=1)
    else:
        text = f"{text.rstrip()}\nrecipe:\n{line}\n"
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
