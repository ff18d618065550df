#!/usr/bin/env bash
# One command on a fresh CPU machine: the whole test suite, in the project's CPU env (.venv, built from
# requirements/test.txt by scripts/setup_cpu_env.sh on first use or when the lock changed), or in PYTHON / the
# active venv if you chose one.
#   bash scripts/run_tests.sh            # extra arguments go to pytest, e.g. -k data_prep
#   PYTEST_WORKERS=0 bash scripts/run_tests.sh -s tests/test_x.py   # one process (-s output, pdb)
. "$(dirname "${BASH_SOURCE[0]}")/help.sh" "$@"  # -h/--help: usage, knobs; runs nothing
set -euo pipefail

REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
. "$REPO_ROOT/scripts/python_env.sh"
PYTHON=${PYTHON:-}       # empty: the active venv, else the project's CPU env (.venv), as scripts/python_env.sh says
# pytest-xdist workers, whole test files each (module fixtures such as the end-to-end run happen once). Much of
# the suite waits on subprocesses, loopback servers and Ray: on 2 cores 3 workers finish sooner than 2
# (docs/testing.md#tiers)
PYTEST_WORKERS=${PYTEST_WORKERS:-3}

use_python cpu
cd "$REPO_ROOT"
# the checkout's own modules, compiled once: where PYTHONDONTWRITEBYTECODE is set, each of the suite's hundreds of
# processes would compile what it imports anew
"$PYTHON" -m compileall -q recipes tools data_prep scripts tests >/dev/null
export WANDB_ERROR_REPORTING=false WANDB_MODE=offline HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1
XDIST=()
# in collection order, where tests/conftest.py puts the end-to-end run first: it is the longest (xdist would
# otherwise start with the files that hold the most tests)
if [ "$PYTEST_WORKERS" != 0 ]; then XDIST=(-n "$PYTEST_WORKERS" --dist loadfile --no-loadscope-reorder); fi
exec "$PYTHON" -m pytest "${XDIST[@]}" "$@"
