"""scripts/setup_cpu_env.sh builds the CPU env and stops there; scripts/run_tests.sh runs the same install steps
(through it) and then pytest. The venv's python is a stand-in that records its arguments: a real build takes
minutes and needs the package index; what is proven here is which commands each script runs, in which order."""

import subprocess
import sys

from recipes.constants import REPO_ROOT

RECORDER = '#!/usr/bin/env bash\necho "$*" >> "$(dirname "$0")/calls.log"\n'  # stand-in for the venv's python


def fake_venv(tmp_path):
    bin_dir = tmp_path / "venv" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "python").write_text(RECORDER)
    (bin_dir / "python").chmod(0o755)
    return tmp_path / "venv"


def run(script, venv, *args, python=sys.executable):
    return subprocess.run(["bash", str(REPO_ROOT / "scripts" / script), *args], capture_output=True, text=True,
                          timeout=60, env={"PATH": "/usr/bin:/bin", "VENV": str(venv), "PYTHON": python},
                          stdin=subprocess.DEVNULL)


def calls(venv) -> list[str]:
    return (venv / "bin" / "calls.log").read_text().splitlines()


INSTALL = ["-m pip install -q --upgrade pip", f"-m pip install -q -r {REPO_ROOT}/requirements/test.txt",
           f"-m pip install -q --no-deps -e {REPO_ROOT}"]


def test_setup_installs_the_lock_and_says_how_to_use_it_without_running_the_suite(tmp_path):
    venv = fake_venv(tmp_path)
    proc = run("setup_cpu_env.sh", venv)
    assert proc.returncode == 0, proc.stderr
    assert calls(venv) == INSTALL  # no pytest
    assert f". {venv}/bin/activate" in proc.stderr


def test_run_tests_installs_through_the_setup_then_runs_pytest(tmp_path):
    venv = fake_venv(tmp_path)
    proc = run("run_tests.sh", venv, "-k", "data_prep")
    assert proc.returncode == 0, proc.stderr
    assert calls(venv) == [*INSTALL, "-m pytest -n 2 --dist loadfile --no-loadscope-reorder -k data_prep"]


def test_setup_refuses_a_python_verl_cannot_use(tmp_path):
    venv = fake_venv(tmp_path)
    python = tmp_path / "python3.13"
    python.write_text('#!/usr/bin/env bash\n[ "$1" = --version ] && { echo "Python 3.13.1"; exit 0; }\nexit 1\n')
    python.chmod(0o755)
    proc = run("setup_cpu_env.sh", venv, python=str(python))
    assert proc.returncode == 1
    assert "verl 0.9.1 needs Python 3.10-3.12; Python 3.13.1 found (set PYTHON=python3.11)" in proc.stderr
    assert not (venv / "bin" / "calls.log").exists()
