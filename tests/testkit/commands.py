"""The recipe's commands (pyproject.toml's [project.scripts]) as the test interpreter's env installed them: what a
user types after `scripts/setup_cpu_env.sh` or `scripts/install_gpu_env.sh`, run as a real process."""

import sysconfig
from pathlib import Path


def command(name: str) -> list[str]:
    """The argv prefix that runs command `name` from this env's bin folder; a clear failure where it is missing."""
    path = Path(sysconfig.get_path("scripts")) / name
    if not path.is_file():
        raise FileNotFoundError(f"{name} is not in {path.parent}: install the recipe into this env "
                                "(pip install -e . --no-deps, as scripts/setup_cpu_env.sh does)")
    return [str(path)]
