"""The import path of a process a test starts from a clean environment: the repo (the installed packages as a
checkout holds them) and scripts/ (the harness, `harness`, and the benchmarks' programs), as the scripts set it."""

import os
from pathlib import Path

from recipes.constants import REPO_ROOT


def recipe_pythonpath(root: Path = REPO_ROOT) -> str:
    return os.pathsep.join([str(root), str(root / "scripts")])
