#!/usr/bin/env bash
# One command on a fresh CPU machine: build the pinned test environment (.venv, scripts/setup_cpu_env.sh) and run
# the whole suite.
#   bash scripts/run_tests.sh            # extra arguments go to pytest, e.g. -k data_prep
#   PYTEST_WORKERS=0 bash scripts/run_tests.sh -s tests/test_x.py   # one process (-s output, pdb)
. "$(dirname "${BASH_SOURCE[0]}")/help.sh" "$@"  # -h/--help: usage, knobs; runs nothing
set -euo pipefail

REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENV=${VENV:-$REPO_ROOT/.venv}
PYTHON=${PYTHON:-python3}
# pytest-xdist workers, whole test files each (module fixtures such as the end-to-end run happen once). Half of
# the suite waits on subprocesses, loopback servers and Ray, so 2 workers fill 2 cores (3 oversubscribe them).
PYTEST_WORKERS=${PYTEST_WORKERS:-2}

VENV=$VENV PYTHON=$PYTHON bash "$REPO_ROOT/scripts/setup_cpu_env.sh"  # the install steps live there only

cd "$REPO_ROOT"
export WANDB_ERROR_REPORTING=false WANDB_MODE=offline HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1
XDIST=()
# in collection order, where tests/conftest.py puts the end-to-end run first: it is the longest (xdist would
# otherwise start with the files that hold the most tests)
if [ "$PYTEST_WORKERS" != 0 ]; then XDIST=(-n "$PYTEST_WORKERS" --dist loadfile --no-loadscope-reorder); fi
exec "$VENV/bin/python" -m pytest "${XDIST[@]}" "$@"
