"""A stop signal sent to the process may be taken by any of its threads (one that is creating a thread or a process
at that moment takes it); the process must stop all the same. Seen once in CI: a Ctrl-C'd launch hung for good, its
relay waiting in `Event.wait()` for a SIGTERM that a request's thread had taken (recipes/signals.py).

`kill(tid)` with a thread's id sends the signal to the whole process but hands it to that thread first: the case
made on purpose. Real processes: the relay under its supervisor, and the W&B stand-in (the launcher: in
test_launch_trace_relay.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from recipes.results.eval_watch import pid_alive
from recipes.trace_relay.names import TRACE_RELAY_TOKEN_ENV
from testkit.paths import recipe_pythonpath
from testkit.threads import children, other_threads

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


def start(tmp_path: Path, *argv: str) -> tuple[subprocess.Popen, Path]:
    url_file, log = tmp_path / "url", tmp_path / "out.log"
    env = {**os.environ, "WANDB_ERROR_REPORTING": "false", "WEAVE_USE_SERVER_CACHE": "false",
           "PYTHONPATH": recipe_pythonpath(), TRACE_RELAY_TOKEN_ENV: "signal-test-" + "t" * 32}  # a relay needs one
    with open(log, "wb") as out:
        process = subprocess.Popen([sys.executable, "-m", *argv, "--url-file", str(url_file)], env=env, stdout=out,
                                   stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 120
    while not url_file.exists():
        assert process.poll() is None and time.monotonic() < deadline, log.read_text()
        time.sleep(0.2)
    return process, log


def gone_within(pid: int, seconds: float) -> bool:
    """Exited within `seconds` (a zombie its parent has not reaped yet counts as exited)."""
    deadline = time.monotonic() + seconds
    while pid_alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def test_a_relay_and_its_supervisor_stop_when_another_thread_takes_the_sigterm(tmp_path):
    supervisor, log = start(tmp_path, "recipes.trace_relay", "serve", "--spool", str(tmp_path / "spool"),
                            "--offline", "--entity", "e")
    try:
        relay = children(supervisor.pid)[0]  # started by the keeper's thread
        os.kill(other_threads(relay)[0], signal.SIGTERM)
        assert gone_within(relay, 20), f"the relay took no notice of a SIGTERM taken by a thread:\n{log.read_text()}"
        assert "trace relay stopped: 0 trace records sent to W&B, 0 pending" in log.read_text()

        os.kill(other_threads(supervisor.pid)[0], signal.SIGTERM)  # its keeper's thread, or the next relay's
        assert supervisor.wait(timeout=60) in (0, 1), log.read_text()  # 1: it stopped while a relay restarted
    finally:
        if supervisor.poll() is None:
            os.killpg(supervisor.pid, signal.SIGKILL)


def test_the_wandb_stand_in_stops_when_another_thread_takes_the_sigterm(tmp_path):
    server, log = start(tmp_path, "harness.standins.weave_http_server")
    try:
        os.kill(other_threads(server.pid)[0], signal.SIGTERM)
        assert server.wait(timeout=20) == 0, log.read_text()
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGKILL)
