"""A wrapper script run with knobs it must refuse: WORK_DIR holds a file of an earlier run, which a refusal leaves
alone. The tests assert on the result: status, the last line of stderr, what WORK_DIR holds."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from recipes.constants import REPO_ROOT

EARLIER_RUN = "kept.txt"


def run_refused(script: str, tmp_path: Path, knobs: dict[str, str]) -> tuple[subprocess.CompletedProcess, str, Path]:
    """scripts/<script> with WORK_DIR=<tmp_path>/work and `knobs` ("{work}" in a value is WORK_DIR): the finished
    process, the last line of its stderr, and WORK_DIR."""
    work = tmp_path / "work"
    work.mkdir()
    (work / EARLIER_RUN).write_text("last run")
    knobs = {k: v.format(work=work) for k, v in knobs.items()}
    proc = subprocess.run(["bash", str(REPO_ROOT / "scripts" / script)], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHON": sys.executable, "WORK_DIR": str(work), **knobs})
    lines = proc.stderr.strip().splitlines()
    return proc, lines[-1] if lines else "", work
