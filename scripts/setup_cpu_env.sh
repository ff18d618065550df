#!/usr/bin/env bash
# Build the pinned CPU environment (.venv) and nothing else: verl, weave, torch CPU and the recipe's own packages,
# from requirements/test.txt (a full lock). The data prep, the dry run, the CPU smoke and the test suite run in it.
#   bash scripts/setup_cpu_env.sh && . .venv/bin/activate
#   PYTHON=python3.11 VENV=/somewhere/else bash scripts/setup_cpu_env.sh
# scripts/run_tests.sh runs this first: the install steps live here only.
. "$(dirname "${BASH_SOURCE[0]}")/help.sh" "$@"  # -h/--help: usage, knobs; runs nothing
set -euo pipefail

REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENV=${VENV:-$REPO_ROOT/.venv}
PYTHON=${PYTHON:-python3}   # the interpreter the venv is made from (verl 0.9.1: 3.10-3.12)

log() { echo "[setup_cpu_env] $*" >&2; }

if ! "$PYTHON" -c 'import sys; sys.exit(not (3, 10) <= sys.version_info[:2] <= (3, 12))' 2>/dev/null; then
  echo "error: verl 0.9.1 needs Python 3.10-3.12; $("$PYTHON" --version 2>&1 || echo "no '$PYTHON'") found" \
       "(set PYTHON=python3.11)" >&2
  exit 1
fi
if [ ! -x "$VENV/bin/python" ]; then
  log "creating $VENV"
  "$PYTHON" -m venv "$VENV"
fi
log "installing requirements/test.txt into $VENV (time: docs/measured.md#ci_install_minutes)"
"$VENV/bin/python" -m pip install -q --upgrade pip
"$VENV/bin/python" -m pip install -q -r "$REPO_ROOT/requirements/test.txt"
# the recipe's packages (recipes, tools, data_prep), editable: scripts import them from anywhere
"$VENV/bin/python" -m pip install -q --no-deps -e "$REPO_ROOT"
log "ready. Use it in this shell with:  . ${VENV/#$PWD\//}/bin/activate"
log "then e.g.: python data_prep/gsm8k.py, bash scripts/smoke_cpu.sh, bash scripts/run_tests.sh"
