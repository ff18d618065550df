"""The suite's tiers hold (tests/testkit/tiers.py, tests/conftest.py): every test file is in exactly one, and a unit
test that starts a process, opens a socket or starts Ray fails, saying what it did, even where the code under test
catches the error. Shown on a scratch suite run by pytest with the repo's conftest hooks and markers, and on the
guard itself."""

import os
import socket
import subprocess
import sys
import threading
import types

import pytest

from recipes.constants import REPO_ROOT
from testkit import tiers

pytestmark = pytest.mark.repo

# the scratch suite's conftest: the repo's hooks (not its fixtures), loaded from the repo's own file
CONFTEST = f"""
import importlib.util
spec = importlib.util.spec_from_file_location("suite_conftest", {str(REPO_ROOT / "tests" / "conftest.py")!r})
suite = importlib.util.module_from_spec(spec)
spec.loader.exec_module(suite)
pytest_collection_modifyitems = suite.pytest_collection_modifyitems
pytest_runtest_setup = suite.pytest_runtest_setup
pytest_runtest_call = suite.pytest_runtest_call
"""
CAUGHT = """
import subprocess, pytest
pytestmark = pytest.mark.{tier}

def test_starts_a_process_and_catches_what_goes_wrong():
    try:
        subprocess.run(["true"], check=True)
    except Exception:
        pass
"""
SOCKET = """
import socket, pytest
pytestmark = pytest.mark.unit

def test_serves_on_loopback():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
"""
IN_PROCESS = """
import json, pytest
pytestmark = pytest.mark.unit

def test_logic():
    assert json.loads("[1]") == [1]
"""


def scratch_suite(tmp_path, files: dict[str, str]) -> subprocess.CompletedProcess:
    (tmp_path / "conftest.py").write_text(CONFTEST)
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(str(REPO_ROOT / d) for d in ("", "tests", "scripts"))}
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist",
                           "-c", str(REPO_ROOT / "pyproject.toml"), "--rootdir", str(tmp_path), str(tmp_path)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)


def test_a_file_without_a_tier_fails_the_collection_and_is_named(tmp_path):
    proc = scratch_suite(tmp_path, {"test_logic.py": IN_PROCESS, "test_untiered.py": IN_PROCESS.replace(
        "pytestmark = pytest.mark.unit", "")})
    assert proc.returncode == pytest.ExitCode.USAGE_ERROR, proc.stdout + proc.stderr
    assert "test files without exactly one tier" in proc.stderr and "test_untiered.py" in proc.stderr
    assert "test_logic.py" not in proc.stderr


def test_an_unknown_marker_is_refused(tmp_path):
    proc = scratch_suite(tmp_path, {"test_typo.py": IN_PROCESS.replace("mark.unit", "mark.unti")})
    assert proc.returncode != 0 and "'unti' not found in `markers` configuration option" in proc.stdout + proc.stderr


def test_a_unit_test_that_starts_a_process_or_opens_a_socket_fails_even_when_it_catches_the_error(tmp_path):
    proc = scratch_suite(tmp_path, {"test_caught_unit.py": CAUGHT.format(tier="unit"), "test_socket.py": SOCKET,
                                    "test_caught_integration.py": CAUGHT.format(tier="integration"),
                                    "test_logic.py": IN_PROCESS})
    out = proc.stdout
    assert proc.returncode == pytest.ExitCode.TESTS_FAILED, out + proc.stderr
    assert "2 failed, 2 passed" in out
    assert "test_caught_unit.py::test_starts_a_process_and_catches_what_goes_wrong is a unit test but starts a " \
           "subprocess" in out
    assert "test_socket.py::test_serves_on_loopback is a unit test but opens a socket" in out


def test_the_guard_refuses_this_thread_and_new_threads_and_lets_earlier_threads_through():
    go, done, results = threading.Event(), threading.Event(), {}

    def earlier():  # a thread that ran before the guard (another test's server): not this test's doing
        go.wait()
        results["earlier"] = subprocess.run(["true"]).returncode
        done.set()

    thread = threading.Thread(target=earlier, daemon=True)
    thread.start()
    with tiers.unit_guard("t") as seen:
        go.set()
        assert done.wait(30) and results["earlier"] == 0
        with pytest.raises(tiers.TierViolation, match="t is a unit test but starts a subprocess"):
            subprocess.run(["true"])
        later = threading.Thread(target=lambda: results.setdefault("later", _socket_error()))
        later.start()
        later.join()
    assert isinstance(results["later"], tiers.TierViolation)
    assert [what.split(" (")[0] for what in seen] == ["t is a unit test but starts a subprocess",
                                                      "t is a unit test but opens a socket"]
    # everything is as it was afterwards
    assert "connect" not in vars(socket.socket) and subprocess.run(["true"]).returncode == 0


def _socket_error():
    try:
        socket.create_connection(("127.0.0.1", 9), timeout=1)
    except tiers.TierViolation as refused:
        return refused


def test_every_test_file_declares_its_tier_where_the_scheduler_reads_it():
    """tests/conftest.py's scheduler reads a file's tier from its source, before any worker imports it."""
    files = sorted((REPO_ROOT / "tests").glob("test_*.py"))
    assert len(files) > 50 and [p.name for p in files if tiers.declared_tier(p) is None] == []
    assert tiers.declared_tier(REPO_ROOT / "tests" / "test_e2e_cpu.py") == "e2e"


def test_a_file_declares_exactly_one_tier():
    assert tiers.file_tier(types.SimpleNamespace(pytestmark=[pytest.mark.integration, pytest.mark.timeout(9)])) == \
        "integration"
    for marks in ([], pytest.mark.timeout(9), [pytest.mark.unit, pytest.mark.repo]):
        with pytest.raises(ValueError, match="exactly one tier"):
            tiers.file_tier(types.SimpleNamespace(pytestmark=marks))
