"""scripts/setup_cpu_env.sh builds the CPU env and stops there; scripts/python_env.sh gives every script its Python
(PYTHON, else the active venv, else the project's env, the CPU one built on first use) and says which; run_tests.sh
runs pytest with it. Each runs from a copy of the repo's scripts, requirements and pyproject.toml (so the project's
.venv is the copy's), with a base Python that stands in for the interpreter: its `-m venv DIR` makes a venv whose
python records its arguments. A real build takes a minute and needs the package index; what is proven here is
which commands run, in which order, and what the user is told."""

import shutil
import subprocess

import pytest

from recipes.constants import REPO_ROOT

pytestmark = pytest.mark.integration

# stands in for a Python 3.11 (base) and for the venv's python made from it: records its arguments, and `-m venv DIR`
# makes DIR/bin/python, a copy of itself
STAND_IN = """#!/usr/bin/env bash
echo "$*" >> "$CALLS"
if [ "$1" = -m ] && [ "$2" = venv ]; then mkdir -p "$3/bin"; cp "$0" "$3/bin/python"; fi
exit 0
"""


@pytest.fixture
def repo(tmp_path):
    root = tmp_path / "repo"
    for folder in ("scripts", "requirements"):
        shutil.copytree(REPO_ROOT / folder, root / folder)
    shutil.copy(REPO_ROOT / "pyproject.toml", root)
    base = tmp_path / "base" / "python3.11"
    base.parent.mkdir()
    base.write_text(STAND_IN)
    base.chmod(0o755)
    return root


def run(repo, script, *args, **env):
    full_env = {"PATH": "/usr/bin:/bin", "HOME": str(repo.parent), "CALLS": str(repo.parent / "calls.log"),
                "BASE_PYTHON": str(repo.parent / "base" / "python3.11"), **env}
    return subprocess.run(["bash", str(repo / "scripts" / script), *args], capture_output=True, text=True,
                          timeout=60, env=full_env, stdin=subprocess.DEVNULL, cwd=repo)


def calls(repo) -> list[str]:
    log = repo.parent / "calls.log"
    lines = log.read_text().splitlines() if log.exists() else []
    log.unlink(missing_ok=True)
    return [line for line in lines if not line.startswith("-c ")]  # the probes: reachability, verl importable


def install(repo):
    venv = repo / ".venv"
    return [f"-m venv {venv}",
            f"-m pip install -q --no-compile --disable-pip-version-check -r {repo}/requirements/test.txt",
            "-m pip install -q --no-compile --disable-pip-version-check --no-deps --no-build-isolation "
            f"-e {repo}",
            f"-m compileall -q -j 0 {venv}/lib"]  # on every core, as pip would one file at a time


COMPILE_CHECKOUT = "-m compileall -q recipes tools data_prep scripts tests"  # once, not in each process of the suite


def test_setup_installs_the_lock_with_hashes_and_no_build_isolation_and_stamps_the_env(repo):
    proc = run(repo, "setup_cpu_env.sh")
    assert proc.returncode == 0, proc.stderr
    assert calls(repo) == install(repo)  # no pytest, no unpinned pip upgrade, no build dependency fetched
    stamp = (repo / ".venv" / ".recipe-lock").read_text().strip()
    assert len(stamp) == 64 and "ready in" in proc.stderr and "activating it is optional" in proc.stderr


def test_run_tests_builds_the_env_on_first_use_in_one_line_then_reuses_it(repo):
    proc = run(repo, "run_tests.sh", "-k", "data_prep")
    assert proc.returncode == 0, proc.stderr
    assert calls(repo) == [*install(repo), COMPILE_CHECKOUT,
                           "-m pytest -n 3 --dist loadfile --no-loadscope-reorder -k data_prep"]
    said = [line for line in proc.stderr.splitlines() if line.startswith("[run_tests]")]
    assert len(said) == 1 and "is not built yet: building it from requirements/test.txt" in said[0], proc.stderr
    assert said[0].rstrip().endswith(" s") and "ready in" in said[0]

    proc = run(repo, "run_tests.sh")  # built from this lock: used as it is
    assert calls(repo) == [COMPILE_CHECKOUT, "-m pytest -n 3 --dist loadfile --no-loadscope-reorder"]
    assert "[run_tests] python: .venv (the project CPU env" in proc.stderr

    with (repo / "requirements" / "test.txt").open("a") as lock:
        lock.write("# changed\n")
    proc = run(repo, "run_tests.sh")  # another lock: built again
    assert calls(repo) == [*install(repo)[1:], COMPILE_CHECKOUT,
                           "-m pytest -n 3 --dist loadfile --no-loadscope-reorder"]
    assert "is older than requirements/test.txt or pyproject.toml: building it" in proc.stderr


def test_python_then_an_active_venv_win_over_the_projects_env(repo, tmp_path):
    chosen = tmp_path / "chosen" / "bin" / "python"
    active = tmp_path / "active"
    for python in (chosen, active / "bin" / "python"):
        python.parent.mkdir(parents=True)
        python.write_text(STAND_IN)
        python.chmod(0o755)
    proc = run(repo, "run_tests.sh", PYTHON=str(chosen), VIRTUAL_ENV=str(active))
    assert proc.returncode == 0 and f"[run_tests] python: {chosen} (PYTHON)" in proc.stderr
    proc = run(repo, "run_tests.sh", VIRTUAL_ENV=str(active))
    assert f"[run_tests] python: {active}/bin/python (the active virtual environment)" in proc.stderr
    assert not (repo / ".venv").exists()  # nothing built: the user chose


def test_a_python_without_verl_is_refused_in_one_line(repo, tmp_path):
    bare = tmp_path / "bare"
    bare.write_text("#!/usr/bin/env bash\n[ \"$1\" = -c ] && exit 1\nexit 0\n")
    bare.chmod(0o755)
    proc = run(repo, "run_tests.sh", PYTHON=str(bare))
    assert proc.returncode == 1
    assert f"[run_tests] error: {bare} cannot import verl: unset PYTHON or deactivate" in proc.stderr


def test_a_gpu_script_without_the_gpu_env_names_the_installer(repo):
    proc = run(repo, "smoke_1gpu.sh")
    assert proc.returncode == 1
    assert "[smoke_1gpu] error: no GPU env at" in proc.stderr and "bash scripts/install_gpu_env.sh" in proc.stderr
    assert not (repo / ".venv").exists()


def test_setup_refuses_a_python_outside_the_locks_range(repo, tmp_path):
    python = tmp_path / "python3.13"
    python.write_text('#!/usr/bin/env bash\n[ "$1" = --version ] && { echo "Python 3.13.1"; exit 0; }\nexit 1\n')
    python.chmod(0o755)
    proc = run(repo, "setup_cpu_env.sh", BASE_PYTHON=str(python))
    assert proc.returncode == 1
    assert "the lock is for Python 3.11-3.12; Python 3.13.1 found (set BASE_PYTHON=python3.11)" in proc.stderr
    assert not (repo / ".venv").exists()


def test_a_broken_python_shim_is_named_before_the_working_one_is_used(repo, tmp_path):
    """A pyenv shim for a version the shell has not selected is on PATH and fails with pyenv's own message: the
    installers' search says so in their own words, first, and goes on to an interpreter that runs."""
    shims, versions = tmp_path / "shims", tmp_path / "pyenv" / "versions" / "3.12.1" / "bin"
    shims.mkdir()
    versions.mkdir(parents=True)
    (shims / "python3.12").write_text("#!/bin/sh\necho 'pyenv: python3.12: command not found' >&2\nexit 127\n")
    (versions / "python3.12").write_text("#!/bin/sh\nexit 0\n")  # runs, and says it is 3.12
    for python in (shims / "python3.12", versions / "python3.12"):
        python.chmod(0o755)
    proc = subprocess.run(["bash", "-c", f'. "{repo}/scripts/python_env.sh"; find_base_python 3.12'],
                          env={"PATH": f"{shims}:/usr/bin:/bin", "PYENV_ROOT": str(tmp_path / "pyenv")},
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0 and proc.stdout.strip() == str(versions / "python3.12")
    assert proc.stderr.startswith(f"[bash] note: {shims}/python3.12 is on PATH but does not run as Python 3.12")

    (versions / "python3.12").unlink()  # none runs: the GPU installer stops with its own hint, not pyenv's
    proc = subprocess.run(["bash", str(repo / "scripts" / "install_gpu_env.sh")], capture_output=True, text=True,
                          env={"PATH": f"{shims}:/usr/bin:/bin", "PYENV_ROOT": str(tmp_path / "pyenv"),
                               "HOME": str(tmp_path)}, timeout=30, stdin=subprocess.DEVNULL)
    assert proc.returncode == 1
    first = proc.stderr.splitlines()[0]
    assert first.startswith("[install_gpu_env] note: ") and "does not run as Python 3.12" in first, proc.stderr
    assert "error: no CPython 3.12 that runs found" in proc.stderr and "BASE_PYTHON=" in proc.stderr


def test_a_script_another_one_runs_says_nothing_more_but_one_started_elsewhere_says_again(repo, tmp_path):
    """smoke_1gpu.sh execs run_gsm8k_grpo.sh: one line for both. A process that merely inherited the first script's
    environment (a test run by run_tests.sh starting a smoke) is not that script: its own line comes back."""
    python = tmp_path / "gpu" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(STAND_IN)
    python.chmod(0o755)
    proc = run(repo, "smoke_1gpu.sh", PYTHON=str(python), DATA_DIR=str(tmp_path / "data"))
    assert proc.returncode == 0, proc.stderr
    said = [line for line in proc.stderr.splitlines() if " python: " in line]
    assert said == [f"[smoke_1gpu] python: {python} (PYTHON)"]
    assert calls(repo)[-1].startswith("-m recipes.launch")
    inherited = {"PYTHON": str(python), "_RECIPE_PYTHON_SAID": f"1 {python}"}  # said by pid 1's script, long ago
    proc = run(repo, "run_tests.sh", **inherited)
    assert f"[run_tests] python: {python} (PYTHON)" in proc.stderr
