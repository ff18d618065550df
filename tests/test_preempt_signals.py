"""The launcher's side of a stop (recipes/launch/training.py StopRequest) against a real child process: the first
signal asks the trainer through the request file and leaves the child alone; a second signal, or the wait running
out, stops it at once; the launch's status and its one line follow from what the trainer answered."""

from __future__ import annotations

import io
import signal
import subprocess
import sys
import time

import pytest

from recipes.launch.knobs import KnobError, Knobs
from recipes.launch.training import StopRequest
from recipes.trainer import stop_request

pytestmark = pytest.mark.integration

CHILD = "import signal, sys, time; signal.signal(signal.SIGTERM, lambda *a: sys.exit(143)); time.sleep(60)"


@pytest.fixture
def child():
    proc = subprocess.Popen([sys.executable, "-c", CHILD])
    time.sleep(0.3)  # its handler is in place
    yield proc
    proc.kill()
    proc.wait()


def test_the_first_signal_asks_the_trainer_and_a_second_stops_main_ppo_at_once(tmp_path, child):
    out = io.StringIO()
    stop = StopRequest(str(tmp_path), wait_s=600, out=out)
    stop.signal("SIGTERM", child)
    assert stop_request.stop_requested(tmp_path)["why"] == "SIGTERM"
    assert child.poll() is None, "the first signal must leave main_ppo to finish its step"
    stop.signal("SIGTERM", child)
    assert child.wait(timeout=10) == 143
    assert "SIGTERM again: stopping main_ppo at once" in out.getvalue()
    assert stop.outcome(143) == stop_request.EXIT_RESUMABLE  # resumable from the newest checkpoint


def test_a_step_that_does_not_end_within_the_wait_is_stopped_at_once(tmp_path, child):
    out = io.StringIO()
    stop = StopRequest(str(tmp_path), wait_s=0.5, out=out)
    stop.signal("SIGUSR1", child)
    stop.check(child)
    assert child.poll() is None
    time.sleep(0.6)
    stop.check(child)
    assert child.wait(timeout=10) == 143
    assert "no step end 0 s after SIGUSR1" in out.getvalue()


def test_the_outcome_names_the_saved_step_and_exits_resumable(tmp_path):
    out = io.StringIO()
    stop = StopRequest(str(tmp_path), wait_s=600, out=out)
    stop.why = "SIGTERM"
    (tmp_path / stop_request.LATEST_FILE).write_text("7")
    stop_request.record_stopped(tmp_path, trained=7, saved=7)
    assert stop.outcome(0) == stop_request.EXIT_RESUMABLE
    assert out.getvalue().strip() == (f"[launch] stopped (SIGTERM) after step 7: checkpoint of step 7 in {tmp_path}/"
                                      "global_step_7; run the same command to resume at step 8 (exit status 75)")


def test_a_run_that_ended_on_its_own_meanwhile_exits_0_and_a_failure_keeps_its_status(tmp_path):
    stop = StopRequest(str(tmp_path), wait_s=600, out=io.StringIO())
    stop.why = "SIGINT"
    assert stop.outcome(0) == 0
    assert stop.outcome(1) == 1


def test_a_stale_request_is_cleared_before_a_launch(tmp_path):
    stop_request.request_stop(tmp_path, "SIGTERM")
    stop_request.record_stopped(tmp_path, 1, 1)
    stop_request.clear(tmp_path)
    assert stop_request.stop_requested(tmp_path) is None and stop_request.read_stopped(tmp_path) is None


def test_stop_wait_minutes_must_be_a_number():
    with pytest.raises(KnobError, match="STOP_WAIT_MINUTES must be a number of minutes"):
        Knobs(stop_wait_minutes="soon").check({})
    assert Knobs().stop_wait_s == 15 * 60


def test_zero_wait_stops_at_once_on_the_first_signal(tmp_path, child):
    stop = StopRequest(str(tmp_path), wait_s=0, out=io.StringIO())
    stop.signal(signal.Signals.SIGTERM.name, child)
    assert child.wait(timeout=10) == 143
    assert stop_request.stop_requested(tmp_path) is None
