#!/usr/bin/env bash
# Build the pinned CPU environment (.venv) and nothing else: verl, weave, torch's CPU build and the recipe's own
# packages, from requirements/test.txt (every package pinned and hash-checked; torch's +cpu wheel from PyTorch's CPU
# index, so no CUDA package is ever installed). The data prep, the dry run, the CPU smoke and the test suite run in
# it; the CPU scripts build it themselves on first use, so running this by hand is optional.
#   bash scripts/setup_cpu_env.sh
#   BASE_PYTHON=python3.11 VENV=/somewhere/else bash scripts/setup_cpu_env.sh
# Re-running it brings the env back to the lock. Time: docs/measured.md (ci_install_minutes).
. "$(dirname "${BASH_SOURCE[0]}")/help.sh" "$@"  # -h/--help: usage, knobs; runs nothing
set -euo pipefail

REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
. "$REPO_ROOT/scripts/python_env.sh"
VENV=${VENV:-$REPO_ROOT/.venv}
BASE_PYTHON=${BASE_PYTHON:-}   # the interpreter the venv is made from; empty: the first CPython 3.11 or 3.12 that
                               # runs (python3 first, then python3.11, python3.12, pyenv's versions)

log() { echo "[setup_cpu_env] $*" >&2; }

if [ -z "$BASE_PYTHON" ]; then
  BASE_PYTHON=$(find_base_python 3.11 3.12) \
    || { log "error: no Python 3.11 or 3.12 found (the lock's range); install one, or set BASE_PYTHON"; exit 1; }
fi
if ! "$BASE_PYTHON" -c 'import sys; sys.exit(not (3, 11) <= sys.version_info[:2] <= (3, 12))' 2>/dev/null; then
  log "error: the lock is for Python 3.11-3.12; $("$BASE_PYTHON" --version 2>&1 | head -n 1 || echo "no '$BASE_PYTHON'")" \
      "found (set BASE_PYTHON=python3.11)"
  exit 1
fi
START=$SECONDS
if [ ! -x "$VENV/bin/python" ]; then
  log "creating $VENV from $BASE_PYTHON"
  "$BASE_PYTHON" -m venv "$VENV"
fi
# torch's +cpu wheel is on PyTorch's index (the lock's --extra-index-url). Where that host cannot be reached, pip would
# retry it for every package (minutes): one try each, and torch must then come from pip's own configuration.
RETRIES=()
if ! "$VENV/bin/python" -c 'import socket; socket.create_connection(("download.pytorch.org", 443), timeout=5).close()' \
     2>/dev/null; then
  log "download.pytorch.org cannot be reached: torch's CPU wheel must come from your pip configuration (a mirror or" \
      "find-links); pip tries that index once"
  RETRIES=(--retries 1)
fi
log "installing requirements/test.txt into $VENV"
# pip compiles each module to bytecode one file at a time (half of the install on 2 cores): compileall below does it
# on every core. Compiled at install, not at first import: with PYTHONDONTWRITEBYTECODE set, each process would compile
# what it imports anew
"$VENV/bin/python" -m pip install -q --no-compile --disable-pip-version-check "${RETRIES[@]}" \
  -r "$REPO_ROOT/requirements/test.txt"
# the recipe's packages (recipes, tools, data_prep), editable: scripts import them from anywhere. setuptools, the
# build backend, is in the lock: no build isolation, nothing fetched unpinned
"$VENV/bin/python" -m pip install -q --no-compile --disable-pip-version-check --no-deps --no-build-isolation \
  -e "$REPO_ROOT"
# status 1 for the few files that are not Python 3 (templates, test data some packages ship), which pip skips too
"$VENV/bin/python" -m compileall -q -j 0 "$VENV/lib" >/dev/null 2>&1 || true
_cpu_env_stamp >"$VENV/.recipe-lock"  # the CPU scripts rebuild the env when the lock or pyproject.toml changes
log "ready in $((SECONDS - START)) s: the CPU scripts use it by themselves (activating it is optional)"
