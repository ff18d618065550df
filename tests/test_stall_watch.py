"""The progress watchdog over a real child process that prints as main_ppo does (recipes/watchdog/watch.py, the
launcher's side of it without the launcher): the clock's rules, progress read from verl's own lines, a slow first
step that raises no alarm, and STALL_ACTION=report, which lets the run go on and reports again only while nothing
moves. The stop path runs through the whole launcher in tests/test_launch_trace_relay.py."""

from __future__ import annotations

import io
import subprocess
import sys
import time

import pytest

from recipes.launch.knobs import KnobError, Knobs
from recipes.watchdog.clock import DERIVED_FLOOR_S, FIRST_STEP_FACTOR, StallClock
from recipes.watchdog.progress import progress_in
from recipes.watchdog.sample import py_spy
from recipes.watchdog.watch import StallWatch, start_watch

pytestmark = pytest.mark.integration

# lines of a real CPU smoke's log (verl 0.9.1 through Ray's log forwarding, colours included)
VERL_LINES = {
    "\x1b[36m(TaskRunner pid=32347)\x1b[0m Training from scratch": ("the trainer's start", None),
    "\x1b[36m(TaskRunner pid=32347)\x1b[0m validation generation end": ("a validation batch", None),
    "\x1b[36m(TaskRunner pid=32347)\x1b[0m step:0 - val-aux/openai/gsm8k/reward/mean@1:np.float64(0.1)":
        ("the initial validation's metrics", None),
    "\x1b[36m(TaskRunner pid=32347)\x1b[0m Training Progress:  50%|█████     | 1/2 [00:14<00:14, 14.14s/it]":
        ("step 1", 1),
    "\x1b[36m(TaskRunner pid=32347)\x1b[0m step:2 - global_seqlen/min:912 - actor/pg_loss:0.01": ("step 2", 2),
    "\x1b[36m(TaskRunner pid=32347)\x1b[0m local_global_step_folder: /out/checkpoints/global_step_2":
        ("a checkpoint save", None),
    "\x1b[36m(TaskRunner pid=32347)\x1b[0m Training Progress:   0%|          | 0/2 [00:00<?, ?it/s]": None,
    "\x1b[36m(CpuRolloutServer pid=645)\x1b[0m [cpu-rollout] {\"event\": \"weights\", \"version\": 1}": None,
}


@pytest.mark.parametrize("line", sorted(VERL_LINES))
def test_progress_is_read_from_verls_own_lines(line):
    progress = progress_in(line)
    assert (progress and (progress.what, progress.step)) == (VERL_LINES[line] or None)


class Ticks:
    def __init__(self):
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_the_limit_is_the_users_as_given_or_four_times_the_slowest_step_and_longer_before_the_first():
    ticks = Ticks()
    derived, given = StallClock(None, now=ticks), StallClock(0.5 * 60, now=ticks)
    assert derived.limit_s() == FIRST_STEP_FACTOR * DERIVED_FLOOR_S and given.limit_s() == FIRST_STEP_FACTOR * 30
    for clock in (derived, given):
        clock.progress("step 1", 1)
    assert (derived.limit_s(), given.limit_s()) == (DERIVED_FLOOR_S, 30)  # the first step is done
    ticks.t = 600.0
    for clock in (derived, given):
        clock.progress("step 2", 2)
    ticks.t = 600.0 + 400
    for clock in (derived, given):
        clock.progress("a validation batch")  # progress, not a step: the step's time runs on
    ticks.t = 600.0 + 800
    for clock in (derived, given):
        clock.progress("step 3", 3)
    assert derived.slowest_step_s == 800 and derived.limit_s() == 4 * 800  # above the floor now
    assert given.limit_s() == 30 and not given.overdue()
    ticks.t += 31
    assert given.overdue() and given.idle_s() == 31


def test_a_step_seen_again_is_not_progress():
    """tqdm redraws its bar when it closes, after the final validation's line or before it: the run's last progress
    stays what really came last, and a run that only repeats its last step is still idle."""
    ticks = Ticks()
    clock = StallClock(60.0, now=ticks)
    clock.progress("step 2", 2)
    ticks.t = 10.0
    clock.progress("the final validation")
    ticks.t = 20.0
    for line in ("(TaskRunner pid=1) Training Progress: 100%|##########| 2/2 [00:40<00:00]", "step:2 - x:1"):
        progress = progress_in(line)
        clock.progress(progress.what, progress.step)
    assert (clock.last_what, clock.idle_s()) == ("the final validation", 10.0)


@pytest.mark.parametrize("value, ok", [("", True), ("0", True), ("0.05", True), ("20", True), ("-1", False),
                                       ("ten", False), ("nan", False), ("inf", False)])
def test_stall_minutes_must_be_a_number_and_stall_action_stop_or_report(prepared_data_dir, value, ok):
    knobs = Knobs(stall_minutes=value, data_dir=str(prepared_data_dir), profile="1gpu_smoke")
    if ok:
        knobs.check({})
        assert (start_watch(knobs, None) is None) == (value == "0")  # 0: no watchdog at all
    else:
        with pytest.raises(KnobError, match="STALL_MINUTES must be a number of minutes"):
            knobs.check({})
    with pytest.raises(KnobError, match="STALL_ACTION must be stop or report, not 'kill'"):
        Knobs(stall_action="kill", data_dir=str(prepared_data_dir), profile="1gpu_smoke").check({})


LIMIT_S = 6.0
SLOW_START_S = 2 * LIMIT_S  # more than the limit, less than the first step's allowance
REPORTS_DUE_S = 90.0  # two reports come about LIMIT_S apart; this is only how long the test waits for them at most
# the stand-in hangs in its own function until the test has seen two reports: each report's samples all fall inside
# the hang however slowly a loaded machine runs py-spy (a hang of fixed length ran out under one CI run's load)
STAND_IN = f"""
import sys, time

def the_stuck_call():
    sys.stdin.readline()

time.sleep({SLOW_START_S})
print("(TaskRunner pid=1) Training from scratch", flush=True)
print("(TaskRunner pid=1) step:1 - actor/pg_loss:0.1", flush=True)
the_stuck_call()
sys.stderr.write("(TaskRunner pid=1) Training Progress: 100%|##########| 2/2 [00:30<00:00, 15.00s/it]\\r")
print("(TaskRunner pid=1) step:2 - actor/pg_loss:0.2", flush=True)
sys.exit(3)
"""


@pytest.mark.skipif(py_spy() is None, reason="py-spy is not installed (requirements/test.txt has it)")
def test_report_mode_lets_the_run_go_on_and_reports_again_only_while_nothing_moves(tmp_path, capfd):
    out = io.StringIO()
    watch = StallWatch(LIMIT_S / 60, "report", str(tmp_path / "run"), None, out)
    stand_in = tmp_path / "main_ppo_stand_in.py"
    stand_in.write_text(STAND_IN)
    child = subprocess.Popen([sys.executable, str(stand_in)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE)
    watch.follow(child)
    waited = time.monotonic() + SLOW_START_S + REPORTS_DUE_S
    while len(watch.reports) < 2 and child.poll() is None and time.monotonic() < waited:
        time.sleep(0.1)
    # released at once: a third report could come no sooner than a limit after the second began, and the second
    # sampled for half a limit
    try:
        child.stdin.close()  # the stand-in's readline returns at end of input
    except BrokenPipeError:
        pass  # it ended on its own: the assertions below say how
    status = watch.finish(child.wait(timeout=120))
    said = out.getvalue()
    assert status == 3, said  # main_ppo's own status: the watchdog did not stop it
    assert len(watch.reports) == 2, said  # none during the slow start, none once step 2 came
    assert sorted(p.name for p in (tmp_path / "run" / "stall").iterdir()) == sorted(r.path.name for r in watch.reports)
    for report in watch.reports:
        assert report.culprit is not None, said
        assert report.culprit.pid == child.pid and report.culprit.stack[0][0] == "the_stuck_call", report.line()
        assert report.step == "in step 2" and report.line() in said
    assert "last: step 1)" in said and "last progress: step 2;" in said
    printed = capfd.readouterr()
    assert "step:2 - actor/pg_loss:0.2" in printed.out and "Training Progress: 100%" in printed.err  # passed through


def test_the_watchdog_imports_no_torch_so_it_never_initialises_a_gpu():
    """What runs in the launcher and, at a stall, in a task on every node: psutil, py-spy and nvidia-smi only."""
    probe = ("import sys, recipes.watchdog.watch, recipes.watchdog.cluster, recipes.watchdog.sample; "
             "print(sorted(m for m in ('torch', 'ray', 'verl') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr
