"""Benchmark: CI time, what `.ci/run` (= `bash scripts/run_tests.sh`) takes on a fresh clone of this repo's HEAD.

    python scripts/bench_ci.py [--runs 1] | python scripts/record_measured.py
    python scripts/bench_ci.py --quick     # one small test file in the clone, this env's python: that it runs

Each run clones HEAD into a temporary folder (committed files only, no .venv: what CI sees; the real GSM8K
linked beside it as beside this checkout, when there, for the tests on the full GSM8K), runs .ci/run there with no
PYTHON and no active venv (so it builds the clone's own env) and times it from its output: install (until pytest's
session header), pytest, and inside pytest the end-to-end file (`tests/test_e2e_cpu.py`, from pytest's
--durations). Time per run: docs/measured.md (ci_minutes).
Last line: `RESULT ci_minutes=<v> ci_install_minutes=<v> ci_pytest_minutes=<v> ci_e2e_minutes=<v> tests_passed=<n>`,
one value per run, comma-separated.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from recipes.constants import REPO_ROOT, SHARED_DIR

E2E_FILE = "tests/test_e2e_cpu.py"
QUICK_TEST = "tests/test_arithmetic.py"  # seconds, no fixture beyond the repo itself
SESSION_START = re.compile(r"^=+ test session starts =+$")
DURATION = re.compile(r"^\s*([0-9.]+)s (?:setup|call|teardown)\s+(\S+?)::")
PASSED = re.compile(r"\b(\d+) passed\b")


def one_run(command: str) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="bench_ci_") as tmp:
        clone = Path(tmp) / "repo"
        subprocess.run(["git", "clone", "--quiet", str(REPO_ROOT), str(clone)], check=True)
        # the shared data beside the repo, as beside CI's checkout: without it the real-GSM8K tests skip
        if SHARED_DIR.is_dir():
            (Path(tmp) / SHARED_DIR.name).symlink_to(SHARED_DIR)
        # every duration over 1 s, so the end-to-end file's setup (its module fixture runs main_ppo) is listed;
        # no interpreter chosen: the clone's scripts build and use its own env, as on a fresh machine
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHON", "VIRTUAL_ENV", "_RECIPE_PYTHON_SAID")}
        env["PYTEST_ADDOPTS"] = "--durations=0 --durations-min=1"
        start = time.monotonic()
        pytest_start = None
        e2e_seconds, passed = 0.0, 0
        proc = subprocess.Popen(command, shell=True, cwd=clone, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
        for line in proc.stdout:
            sys.stderr.write(line)  # the run's own output, kept off stdout where only RESULT goes
            if pytest_start is None and SESSION_START.match(line.strip()):
                pytest_start = time.monotonic()
            if (d := DURATION.match(line)) and d.group(2) == E2E_FILE:
                e2e_seconds += float(d.group(1))
            if p := PASSED.search(line):
                passed = int(p.group(1))
        end = time.monotonic()
        if proc.wait() != 0:
            raise RuntimeError(f"{command} failed with exit code {proc.returncode} in {clone}")
        if pytest_start is None:
            raise RuntimeError("no pytest session header in the output: is this still what .ci/run runs?")
    return {"ci_minutes": (end - start) / 60, "ci_install_minutes": (pytest_start - start) / 60,
            "ci_pytest_minutes": (end - pytest_start) / 60, "ci_e2e_minutes": e2e_seconds / 60,
            "tests_passed": passed}


def shown(value: float) -> str:
    return str(value) if isinstance(value, int) else f"{value:.1f}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=1)
    p.add_argument("--command", default="bash .ci/run", help="what CI runs, in the clone (default: %(default)s)")
    p.add_argument("--quick", action="store_true", help="--runs 1 with a small test file for --command")
    args = p.parse_args(argv)
    if args.quick:
        args.runs, args.command = 1, f"{shlex.quote(sys.executable)} -m pytest {QUICK_TEST}"
    runs = []
    for i in range(args.runs):
        try:
            runs.append(one_run(args.command))
        except (RuntimeError, subprocess.CalledProcessError) as e:
            print(f"bench_ci: run {i + 1}: {e}", file=sys.stderr)
            return 1
        print(f"run {i + 1}/{args.runs}: " + ", ".join(f"{k} {shown(v)}" for k, v in runs[-1].items()))
    fields = " ".join(f"{key}=" + ",".join(shown(r[key]) for r in runs) for key in runs[0])
    print(f"RESULT {fields}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
