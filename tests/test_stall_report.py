"""The stall report on real processes: py-spy samples a process tree from outside (recipes/watchdog/sample.py), the
analysis (recipes/watchdog/culprit.py) names the process and frame a stalled run sits in, and the folder is written
whole (recipes/watchdog/stall_report.py). The processes are tests/testkit/stuck_processes.py: one whose event loop is
held by a synchronous call, as a tool that blocks its agent-loop worker holds it, beside an idle one."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from recipes.watchdog.culprit import Suspect, phase_of, suspects, trainer_phase
from recipes.watchdog.sample import py_spy, sample_node
from recipes.watchdog.stall_report import write_report

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(py_spy() is None, reason="py-spy is not installed (requirements/test.txt has it)")]
CLOCK = {"idle_s": 90.0, "limit": "1 min (STALL_MINUTES)", "last_what": "step 3", "last_step": 3, "last_ago_s": 95.0}


@pytest.fixture(scope="module")
def stuck(tmp_path_factory):
    """The tree: {"parent": pid, "blocked": pid, "waiting": pid}, ended after the module."""
    ready = tmp_path_factory.mktemp("stuck") / "ready.json"
    parent = subprocess.Popen([sys.executable, "-m", "testkit.stuck_processes", "tree", str(ready)],
                              start_new_session=True)
    deadline = time.monotonic() + 60
    while not ready.exists():
        assert parent.poll() is None and time.monotonic() < deadline, "the stuck processes did not start"
        time.sleep(0.1)
    try:
        yield {"parent": parent.pid, **json.loads(ready.read_text())}
    finally:
        os.killpg(parent.pid, signal.SIGKILL)
        parent.wait()


def test_the_thread_held_in_its_own_code_is_the_culprit_and_the_idle_process_a_bystander(stuck):
    node = sample_node([stuck["parent"]], window_s=1.0, samples=3)
    assert {p["pid"] for p in node["processes"]} == set(stuck.values())
    assert all(len(p["samples"]) == 3 for p in node["processes"])
    ranked = suspects([node])
    culprit = ranked[0]
    assert (culprit.pid, culprit.thread) == (stuck["blocked"], "AsyncIO Thread: default"), [s.where() for s in ranked]
    assert culprit.stack[0][0] == "hold_the_loop" and culprit.stack[0][1].endswith("testkit/stuck_processes.py")
    assert "a_tool_call" in [frame[0] for frame in culprit.stack]
    assert "every sample (3) at hold_the_loop (tests/testkit/stuck_processes.py:" in culprit.why
    assert stuck["waiting"] not in {s.pid for s in ranked}  # waiting in select or on an event: no suspect


def test_a_stopped_process_comes_first_and_the_report_is_written_whole(stuck, tmp_path):
    os.kill(stuck["waiting"], signal.SIGSTOP)
    try:
        while psutil.Process(stuck["waiting"]).status() != psutil.STATUS_STOPPED:  # the stop is delivered
            time.sleep(0.01)
        node = sample_node([stuck["parent"]], window_s=1.0, samples=3)
    finally:
        os.kill(stuck["waiting"], signal.SIGCONT)
    ranked = suspects([node])
    assert (ranked[0].pid, ranked[0].rank) == (stuck["waiting"], 1) and "stopped in every sample" in ranked[0].why
    assert ranked[1].pid == stuck["blocked"]
    report = write_report(tmp_path / "stall", [node], CLOCK, ["(TaskRunner pid=1) step:3 - x:1"], [])
    assert sorted(p.name for p in (tmp_path / "stall").iterdir()) == [report.path.name]  # no partial folder left
    assert sorted(p.name for p in report.path.iterdir()) == ["log_tail.txt", "samples.json", "stacks.txt",
                                                             "summary.md"]
    line = report.line()
    assert line.startswith(f"[stall] likely culprit: pid {stuck['waiting']} ") and line.endswith(str(report.path))
    assert "in step 4" in line
    summary = (report.path / "summary.md").read_text()
    assert line in summary and f"| {stuck['blocked']} | {stuck['parent']} | sleeping |" in summary
    stacks = (report.path / "stacks.txt").read_text()
    assert f"==== pid {stuck['blocked']} " in stacks and "[3 of 3 samples]" in stacks
    assert json.loads((report.path / "samples.json").read_text())["clock"] == CLOCK


def _trainer_line(text: str, after: str = "def fit(") -> tuple[str, int]:
    """verl's installed ray_trainer.py and the first line holding `text` after `after` (read, not assumed)."""
    import verl.trainer.ppo.ray_trainer as trainer

    lines = Path(trainer.__file__).read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if after in line)
    return trainer.__file__, next(i for i in range(start, len(lines)) if text in lines[i]) + 1


def _thread(*frames) -> dict:
    return {"processes": [{"pid": 1, "samples": [{"threads": [{"frames": list(frames)}]}]}]}


# what py-spy read in the trainer's thread (Ray's TaskRunner actor) on CPU, innermost first: verl runs the rollout
# manager's coroutines to completion from fit itself, so the loop's own line says what it waits for
_SELECT = ["EpollSelector.select", "/usr/lib/python3.11/selectors.py", 468]
_AWAIT = ["auto_await.<locals>.wrapper", "/v/site-packages/verl/utils/ray_utils.py", 124]


@pytest.mark.parametrize("call, phase", [("self.async_rollout_manager.generate_sequences(", "rollout"),
                                         ("self.checkpoint_manager.update_weights(", "weight sync")])
def test_the_phase_is_the_line_of_fit_the_trainer_waits_on(call, phase):
    file, line = _trainer_line(call)
    assert trainer_phase([_thread(_SELECT, _AWAIT, ["RayPPOTrainer.fit", file, line])]) == phase


def test_the_phase_is_the_trainers_method_and_a_validation_holds_its_rollout():
    fit = ["RayPPOTrainer.fit", *_trainer_line("self._update_actor(")]
    update = ["RayPPOTrainer._update_actor", *_trainer_line("self.actor_rollout_wg.update_actor(", "def _update_actor")]
    assert trainer_phase([_thread(["Worker.get_objects", "/v/ray/_private/worker.py", 1007], update, fit)]) == "update"
    validate = ["RayPPOTrainer._validate", *_trainer_line("generate_sequences(", "def _validate")]
    assert trainer_phase([_thread(_SELECT, _AWAIT, validate, fit)]) == "validation"
    assert trainer_phase([_thread(_SELECT)]) == "start-up (no trainer loop yet)"


def test_the_rollout_part_is_named_from_the_functions_on_the_culprits_stack():
    """A blocking reward runs in the recipe's scoring (its call sits in a closure handed to an executor), a blocking
    tool in verl's tool call: their names are read from the functions themselves, so a rename fails here."""
    import inspect

    from verl.experimental.agent_loop.tool_agent_loop import ToolAgentLoop

    from recipes.gsm8k import score

    nodes = [_thread(_SELECT, _AWAIT, ["RayPPOTrainer.fit", *_trainer_line("generate_sequences(")])]
    reward = Suspect(rank=2, node="n", pid=2, command="c", why="w", stack=[
        ["compute_score", "/t/my_reward.py", 3],
        [f"{score.score_trajectory.__qualname__}.<locals>.<lambda>", score.__file__, 67]])
    assert phase_of(nodes, reward) == "rollout (the reward, scored in the agent loop)"
    tool = Suspect(rank=2, node="n", pid=2, command="c", why="w", stack=[
        ["SlowTool.execute", "/t/my_tool.py", 5],
        [ToolAgentLoop._call_tool.__qualname__, inspect.getfile(ToolAgentLoop), 1]])
    assert phase_of(nodes, tool) == "rollout (a tool call)"
    assert phase_of(nodes, Suspect(rank=2, node="n", pid=2, command="c", why="w",
                                   stack=[["handler", "/t/other.py", 1]])) == "rollout"


def _held(pid: int, frames: list, states=("sleeping",) * 4, failed=()) -> dict:
    """A process as sample_node records it: the same stack at each sample, py-spy's error at the `failed` ones."""
    samples = [{"t": i, "state": state, **({"error": "py-spy: failed to read memory"} if i in failed else
                                          {"threads": [{"name": "main", "tid": 7, "active": False, "frames": frames}]})}
               for i, state in enumerate(states)]
    return {"pid": pid, "command": f"python stand_in_{pid}.py", "samples": samples}


def test_a_failed_dump_leaves_the_other_samples_to_judge_by_and_a_process_that_ended_is_no_suspect():
    held = [["the_stuck_call", "/run/stand_in.py", 4], ["<module>", "/run/stand_in.py", 9]]
    node = {"host": "h", "ip": "127.0.0.1", "processes": [
        _held(11, held, failed={2}),
        _held(12, held, states=("sleeping", "sleeping", "gone", "gone"), failed={2, 3}),
        _held(13, held, failed={0, 1, 3})]}
    ranked = suspects([node])
    assert [(s.pid, s.rank) for s in ranked] == [(11, 2)], [s.where() for s in ranked]
    assert ranked[0].why.startswith("every sample (3) at the_stuck_call (/run/stand_in.py:4)")
