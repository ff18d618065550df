# shellcheck shell=bash
# Sourced, not run: which Python a script runs with, said in one line on stderr. In order:
#   PYTHON, if set                    -> that interpreter
#   an active virtual environment     -> $VIRTUAL_ENV/bin/python
#   the project's own env             -> .venv (CPU scripts; built on first use by scripts/setup_cpu_env.sh, one line
#                                        saying so and how long it took) or .venv-gpu (scripts/install_gpu_env.sh)
# so activating an env is possible, never required. In a script, after help.sh:
#   . "$(dirname "${BASH_SOURCE[0]}")/python_env.sh"
#   use_python cpu     # or gpu; or auto: .venv-gpu if there, else .venv if there
# The installers pick the interpreter an env is made from with find_base_python 3.12 [3.11 ...]: the first one that
# runs as that version (a pyenv shim for a version the shell has not selected is on PATH but fails).
if [ "${BASH_SOURCE[0]}" = "$0" ]; then  # run, not sourced: say what it is
  awk 'NR > 1 && /^#/ { sub(/^# ?/, "  "); print; next } NR > 1 { exit }' "$0"; exit 0
fi

_PY_REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

_py_say() { echo "[$(basename "$0" .sh)] $*" >&2; }

# CANDIDATE X.Y...: the candidate runs as one of these versions (quietly: a broken shim prints its own complaint)
_py_is() {
  local c=$1; shift
  "$c" -c 'import sys; sys.exit(f"{sys.version_info[0]}.{sys.version_info[1]}" not in sys.argv[1:])' "$@" \
    >/dev/null 2>&1
}

find_base_python() {  # X.Y [X.Y ...]: prints the first interpreter of these versions that runs, python3 first
  local v c p seen=" " pyenv_root=${PYENV_ROOT:-$HOME/.pyenv} candidates=(python3)
  for v in "$@"; do
    candidates+=("python$v" "$pyenv_root"/versions/"$v".*/bin/"python$v" "/usr/bin/python$v" "/usr/local/bin/python$v")
  done
  for c in "${candidates[@]}"; do
    p=$(command -v "$c" 2>/dev/null) || continue
    case "$seen" in *" $p "*) continue ;; esac
    seen="$seen$p "
    if _py_is "$p" "$@"; then echo "$p"; return 0; fi
    case "$c" in python3.*)  # named for a version and broken: say so before anything else does
      _py_say "note: $p is on PATH but does not run as Python ${c#python} (a pyenv shim for a version this shell has" \
              "not selected?): $("$p" --version 2>&1 | head -n 1)" ;;
    esac
  done
  return 1
}

_cpu_env_stamp() {  # what the CPU env was built from: setup_cpu_env.sh writes it last, use_python compares
  cat "$_PY_REPO_ROOT/requirements/test.txt" "$_PY_REPO_ROOT/pyproject.toml" | sha256sum | cut -d' ' -f1
}

_build_cpu_env() {  # one line: that it builds, then how long it took (its output goes to a log)
  local start=$SECONDS log=$_PY_REPO_ROOT/.venv/setup.log
  mkdir -p "$_PY_REPO_ROOT/.venv"
  printf '[%s] python: .venv, the project CPU env, is %s: building it from requirements/test.txt (log: %s) ...' \
    "$(basename "$0" .sh)" "$1" "${log#"$PWD"/}" >&2
  if ! bash "$_PY_REPO_ROOT/scripts/setup_cpu_env.sh" >"$log" 2>&1; then
    echo " FAILED; the end of its log:" >&2
    tail -n 15 "$log" >&2
    exit 1
  fi
  echo " ready in $((SECONDS - start)) s" >&2
}

use_python() {  # cpu | gpu | auto: sets and exports PYTHON
  local kind=$1 venv=$_PY_REPO_ROOT/.venv gpu_venv=$_PY_REPO_ROOT/.venv-gpu
  if [ -n "${PYTHON:-}" ] && { [ "${_RECIPE_PYTHON_SAID:-}" = "$$ $PYTHON" ] ||
                                [ "${_RECIPE_PYTHON_SAID:-}" = "$PPID $PYTHON" ]; }; then
    return 0  # chosen and said by the script that execs or runs this one (not by one further up: it says again)
  elif [ -n "${PYTHON:-}" ]; then
    _py_say "python: $PYTHON (PYTHON)"
  elif [ -n "${VIRTUAL_ENV:-}" ] && [ -x "$VIRTUAL_ENV/bin/python" ]; then
    PYTHON=$VIRTUAL_ENV/bin/python
    _py_say "python: $PYTHON (the active virtual environment)"
  elif [ "$kind" != cpu ] && [ -x "$gpu_venv/bin/python" ]; then
    PYTHON=$gpu_venv/bin/python
    _py_say "python: .venv-gpu (the project GPU env; PYTHON=... or an active venv to use another)"
  elif [ "$kind" = gpu ]; then
    _py_say "error: no GPU env at $gpu_venv: run bash scripts/install_gpu_env.sh first (or set PYTHON)"
    exit 1
  elif [ "$kind" = auto ] && [ ! -x "$venv/bin/python" ]; then
    _py_say "error: no env in $gpu_venv or $venv: run bash scripts/install_gpu_env.sh on a GPU node," \
            "bash scripts/setup_cpu_env.sh elsewhere (or set PYTHON)"
    exit 1
  else
    if [ ! -x "$venv/bin/python" ]; then
      _build_cpu_env "not built yet"
    elif [ "$(cat "$venv/.recipe-lock" 2>/dev/null)" != "$(_cpu_env_stamp)" ]; then
      _build_cpu_env "older than requirements/test.txt or pyproject.toml"
    else
      _py_say "python: .venv (the project CPU env; PYTHON=... or an active venv to use another)"
    fi
    PYTHON=$venv/bin/python
  fi
  if ! "$PYTHON" -c 'import importlib.util as u, sys; sys.exit(u.find_spec("verl") is None)' 2>/dev/null; then
    _py_say "error: $PYTHON cannot import verl: unset PYTHON or deactivate to use the project's env, or install" \
            "requirements/test.txt (CPU) or requirements/gpu.txt (GPU) into it"
    exit 1
  fi
  _RECIPE_PYTHON_SAID="$$ $PYTHON"
  export PYTHON _RECIPE_PYTHON_SAID
}
