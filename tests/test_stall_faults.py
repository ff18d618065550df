"""The progress watchdog against real stalls of a real CPU run: verl's main_ppo through scripts/smoke_cpu.sh (its first
launch, tracing on against a loopback W&B, STALL_MINUTES=1), each case with one fault the test injects itself once
step 1 is done (tests/testkit/stall_faults.py; the rollout server is stopped from here), and the runs that must
raise no alarm. Each stall must be reported within STALL_MINUTES plus one poll of the last progress, its report
must name the stuck process and frame, and the run must stop with the watchdog's status, its traces delivered.

A whole CPU launch per case (2 to 5 minutes each on 2 cores): not part of CI, which runs the stop path through the
launcher with a stand-in main_ppo (tests/test_launch_trace_relay.py), the watchdog over a real child
(tests/test_stall_watch.py), the report on real processes (tests/test_stall_report.py) and on a real two-node
cluster (tests/test_multinode_ray_job.py). Run the matrix with

    STALL_FAULT_MATRIX=1 python -m pytest tests/test_stall_faults.py -v -s

Each case prints one `[fault matrix]` line: the culprit line and how long after the last progress the alarm came.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import pytest

from recipes.constants import REPO_ROOT, SHARED_GSM8K_DIR
from recipes.watchdog.progress import progress_in
from recipes.watchdog.watch import POLL_MAX_S, STALL_EXIT
from testkit.stall_faults import ARMED_ENV, FAULT_ENV, HOLD_ENV

MATRIX_ENV = "STALL_FAULT_MATRIX"
pytestmark = [pytest.mark.e2e,
              pytest.mark.skipif(not os.environ.get(MATRIX_ENV), reason=f"a CPU launch each: {MATRIX_ENV}=1 runs them"),
              pytest.mark.timeout(1500)]
STALL_MINUTES = 1.0
LIMIT_S = STALL_MINUTES * 60
POLL_S = min(POLL_MAX_S, LIMIT_S / 10)  # recipes/watchdog/watch.py's poll at this limit
LINE_SLACK_S = 3.0  # a line's way from main_ppo through Ray's log forwarding, the launcher and the shell's tee
FAULTS = str(REPO_ROOT / "tests" / "testkit" / "stall_faults.py")
_NOT_PASSED_ON = ("RAY_", "VERL_", "WORK_DIR", "OUTPUT_DIR", "PROFILE", "DATA_DIR", "MODEL_PATH", "RESUME_CHECK",
                  "EXPERIMENT_NAME", "SUBMIT", "TRACE", "STALL_", "WANDB_", "WF_", "WEAVE_", "NODES")


@dataclass
class Run:
    returncode: int
    lines: list[tuple[float, str]]
    output: Path
    calls: int
    events: dict = field(default_factory=dict)

    @property
    def text(self) -> str:
        return "\n".join(line for _, line in self.lines)

    def first(self, prefix: str) -> tuple[float, str] | None:
        return next(((t, line) for t, line in self.lines if line.startswith(prefix)), None)

    def detection_s(self) -> float:
        """From the last progress line to the watchdog's alarm, as this test saw the lines arrive."""
        alarm = self.first("[stall] no progress for ")
        assert alarm, self.text[-4000:]
        progress = [t for t, line in self.lines if t <= alarm[0] and progress_in(line)]
        return alarm[0] - progress[-1]


def smoke(tmp_path: Path, env: dict | None = None, overrides: tuple[str, ...] = (), on_line=None) -> Run:
    """scripts/smoke_cpu.sh's first launch, its output read line by line as it comes (on_line(line, run) may inject
    a fault); everything it started is ended afterwards."""
    from harness.standins.weave_http_server import loopback_wandb

    work = tmp_path / "smoke"
    gsm8k = SHARED_GSM8K_DIR if (SHARED_GSM8K_DIR / "train.jsonl").is_file() else REPO_ROOT / "tests" / "fixtures" \
        / "gsm8k_mini"
    base = {k: v for k, v in os.environ.items() if not k.startswith(_NOT_PASSED_ON)}
    base.update(PYTHON=sys.executable, WORK_DIR=str(work), GSM8K_DIR=str(gsm8k), RESUME_CHECK="0", TRACE="on",
                STALL_MINUTES=str(STALL_MINUTES), WANDB_ERROR_REPORTING="false", **(env or {}))
    run = Run(returncode=-1, lines=[], output=work / "outputs", calls=0)
    with loopback_wandb() as wandb:
        proc = subprocess.Popen(["bash", str(REPO_ROOT / "scripts" / "smoke_cpu.sh"), *overrides],
                                env={**base, **wandb.env}, text=True, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                                errors="replace")
        run.events.update(start=time.monotonic(), sid=proc.pid)  # its own session: everything it starts
        try:
            for raw in proc.stdout:
                for line in raw.rstrip("\n").split("\r"):
                    run.lines.append((time.monotonic(), line))
                    if on_line:
                        on_line(line, run)
            run.returncode = proc.wait(timeout=60)
        finally:
            _end_session(proc.pid)
        run.calls = len(wandb.storage.complete_call_ids())
    (tmp_path / "smoke.log").write_text(run.text)
    return run


def _end_session(sid: int) -> None:
    for proc in psutil.process_iter():
        try:
            if os.getsid(proc.pid) == sid:
                os.kill(proc.pid, signal.SIGCONT)
                proc.kill()
        except (ProcessLookupError, PermissionError, psutil.Error):
            pass


def arm_after_step_one(armed: Path):
    def on_line(line: str, run: Run) -> None:
        if "step:1 - " in line and not armed.exists():
            armed.write_text("")
            run.events["armed"] = time.monotonic()
    return on_line


def culprit(run: Run) -> str:
    found = run.first("[stall] likely culprit: ")
    assert found, run.text[-6000:]
    return found[1]


def report_dir(run: Run) -> Path:
    return Path(culprit(run).rsplit("report: ", 1)[1])


def assert_stopped_with_evidence(run: Run, case: str) -> str:
    """Stopped by the watchdog within the limit plus a poll, traces delivered; prints and returns the culprit line."""
    line = culprit(run)
    detected = run.detection_s()
    print(f"\n[fault matrix] {case}: {line} (alarm {detected:.1f} s after the last progress; limit {LIMIT_S:g} s, "
          f"poll {POLL_S:g} s)", flush=True)
    assert run.returncode == STALL_EXIT, run.text[-4000:]
    assert LIMIT_S < detected <= LIMIT_S + POLL_S + LINE_SLACK_S, detected
    assert "[stall] STALL_ACTION=stop: stopping the run as Ctrl-C does" in run.text
    relay = next(text for _, text in run.lines if text.startswith("[traces] trace relay on "))
    assert relay.endswith(", 0 pending") and run.calls > 0, (relay, run.calls)  # traces kept: all delivered
    summary = (report_dir(run) / "summary.md").read_text()
    assert line in summary and "## Processes" in summary and (report_dir(run) / "stacks.txt").stat().st_size > 0
    return line


def test_a_normal_smoke_raises_no_alarm(tmp_path):
    run = smoke(tmp_path)
    assert run.returncode == 0, run.text[-4000:]
    assert "[stall] watchdog: no stall; last progress: the final validation;" in run.text
    assert not (run.output / "stall").exists()
    print(f"\n[fault matrix] normal smoke: {run.first('[stall] watchdog:')[1]}", flush=True)


def test_a_slow_first_step_raises_no_alarm(tmp_path):
    """The first training step's reward sleeps 1.5 x STALL_MINUTES: longer than the limit, shorter than the first
    step's allowance (recipes/watchdog/clock.py)."""
    run = smoke(tmp_path, env={FAULT_ENV: "reward", HOLD_ENV: str(1.5 * LIMIT_S)},
                overrides=(f"reward.custom_reward_function.path={FAULTS}",))
    assert run.returncode == 0, run.text[-4000:]
    assert "[stall] watchdog: no stall;" in run.text and not (run.output / "stall").exists()
    start = next(t for t, line in run.lines if "Training from scratch" in line)
    step1 = next(t for t, line in run.lines if "step:1 - " in line)
    assert step1 - start > LIMIT_S  # slow indeed: it alone took longer than STALL_MINUTES
    print(f"\n[fault matrix] slow first step ({step1 - start:.0f} s from the trainer's start to step 1): no alarm",
          flush=True)


def test_a_tool_call_that_never_returns_costs_trajectories_not_the_run(tmp_path):
    """Every calculator call awaits forever (testkit.stall_faults.NeverAnsweringCalculator): each is cut at the
    recipe's bound, its trajectory scored 0 and counted, and the run trains on without an alarm."""
    tools = tmp_path / "never_answers.yaml"
    tools.write_text("tools:\n  - class_name: testkit.stall_faults.NeverAnsweringCalculator\n"
                     "    config:\n      type: native\n")
    run = smoke(tmp_path, overrides=(f"actor_rollout_ref.rollout.multi_turn.tool_config_path={tools}",
                                     "actor_rollout_ref.rollout.custom.tool_timeout_s=5"))
    assert run.returncode == 0 and "[stall] watchdog: no stall;" in run.text, run.text[-4000:]
    counted = [float(m) for m in re.findall(r"timing_s/agent_loop/tool_timeouts/sum:(\d+\.?\d*)", run.text)]
    records = [json.loads(line) for step in (1, 2) for line in (run.output / "rollouts" / f"{step}.jsonl").open()]
    cut = [r for r in records if r["tool_timeouts"]]
    assert counted and sum(counted) == sum(r["tool_timeouts"] for r in records) > 0, (counted, len(cut))
    assert all(r["score"] == 0.0 for r in cut)
    print(f"\n[fault matrix] hung tool call: {len(cut)} of {len(records)} trajectories cut at 5 s, scored 0, counted "
          f"({counted}); no alarm", flush=True)


def test_a_stopped_rollout_server_is_named(tmp_path):
    """SIGSTOP, from here, to one hf_cpu rollout server once step 2's rollout has begun (a steered call made with
    the weights of step 1)."""
    stopped: dict = {}

    def stop_when_rolling(events_file: Path, sid: int) -> None:
        while not stopped:
            text = events_file.read_text() if events_file.exists() else ""
            if any(json.loads(line).get("event") == "steered_tool_call" and json.loads(line).get("version", 0) >= 1
                   for line in text.splitlines()):
                servers = sorted(p.pid for p in psutil.process_iter(["cmdline"]) if _in_session(p, sid) and
                                 " ".join(p.info["cmdline"] or []).startswith("ray::CpuRolloutServer"))
                os.kill(servers[0], signal.SIGSTOP)
                stopped["pid"] = servers[0]
                return
            time.sleep(0.2)

    def on_line(line: str, run: Run) -> None:
        if "step:1 - " in line and "thread" not in run.events:
            events = run.output / "logs" / "train.rollout_events.jsonl"
            run.events["thread"] = threading.Thread(target=stop_when_rolling, args=(events, run.events["sid"]),
                                                    daemon=True)
            run.events["thread"].start()

    run = smoke(tmp_path, on_line=on_line)
    line = assert_stopped_with_evidence(run, "rollout server SIGSTOPped mid-rollout")
    assert f"pid {stopped['pid']} `ray::CpuRolloutServer" in line and "stopped in every sample" in line
    assert "phase rollout" in line


def test_a_tool_that_blocks_its_event_loop_is_named(tmp_path):
    tools = tmp_path / "blocking.yaml"
    tools.write_text("tools:\n  - class_name: testkit.stall_faults.LoopBlockingCalculator\n"
                     "    config:\n      type: native\n")
    armed = tmp_path / "armed"
    run = smoke(tmp_path, env={FAULT_ENV: "tool", ARMED_ENV: str(armed)},
                overrides=(f"actor_rollout_ref.rollout.multi_turn.tool_config_path={tools}",),
                on_line=arm_after_step_one(armed))
    line = assert_stopped_with_evidence(run, "tool blocking its event loop")
    assert "AgentLoopWorker" in line and "LoopBlockingCalculator.execute (tests/testkit/stall_faults.py:" in line
    assert "phase rollout (a tool call)" in line


def test_a_reward_function_that_blocks_is_named(tmp_path):
    armed = tmp_path / "armed"
    run = smoke(tmp_path, env={FAULT_ENV: "reward", ARMED_ENV: str(armed)},
                overrides=(f"reward.custom_reward_function.path={FAULTS}",), on_line=arm_after_step_one(armed))
    line = assert_stopped_with_evidence(run, "reward function blocking")
    assert "AgentLoopWorker" in line and "compute_score (tests/testkit/stall_faults.py:" in line
    assert "phase rollout (the reward, scored in the agent loop)" in line


def test_a_rank_sleeping_in_the_update_is_named(tmp_path):
    armed = tmp_path / "armed"
    run = smoke(tmp_path, env={FAULT_ENV: "update", ARMED_ENV: str(armed)},
                overrides=("actor_rollout_ref.model.external_lib=testkit.stall_faults",),
                on_line=arm_after_step_one(armed))
    line = assert_stopped_with_evidence(run, "rank sleeping inside the update")
    assert "`ray::WorkerDict.actor_rollout_ref_update_actor`" in line and "forward_backward_batch" in line
    assert "phase update" in line


def test_on_a_two_node_cluster_the_report_has_every_nodes_stacks(tmp_path):
    """SUBMIT=ray on a Ray cluster of two nodes on this machine (scripts/smoke_cpu.sh NODES=2, one rank per node): the
    watchdog runs in the job's entrypoint, and rank 0 sleeps inside the update on whichever node it is."""
    armed = tmp_path / "armed"
    run = smoke(tmp_path, env={"NODES": "2", "FAULTS": "0", FAULT_ENV: "update", ARMED_ENV: str(armed)},
                overrides=("actor_rollout_ref.model.external_lib=testkit.stall_faults",),
                on_line=arm_after_step_one(armed))
    line = culprit(run)
    detected = run.detection_s()
    print(f"\n[fault matrix] two nodes, SUBMIT=ray, rank sleeping inside the update: {line} (alarm {detected:.1f} s "
          f"after the last progress)", flush=True)
    assert run.returncode != 0 and "[stall] STALL_ACTION=stop: stopping" in run.text
    assert detected <= LIMIT_S + POLL_S + LINE_SLACK_S
    assert "forward_backward_batch" in line and "phase update" in line
    nodes = json.loads((report_dir(run) / "samples.json").read_text())["nodes"]
    on_cluster = [n for n in nodes if not n.get("local")]
    assert len(on_cluster) == 2 and all(any(p.get("python") for p in n["processes"]) for n in on_cluster), \
        [n["label"] for n in nodes]


def _in_session(proc: psutil.Process, sid: int) -> bool:
    try:
        return os.getsid(proc.pid) == sid
    except (ProcessLookupError, PermissionError):
        return False

