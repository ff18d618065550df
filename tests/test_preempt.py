"""Stop = save, resume = the same command, through the real launcher and verl's main_ppo on the CPU.

One CPU run of 3 steps with `save_freq` 3 (no periodic checkpoint before the end): SIGTERM to the launcher while
step 2 trains; the launch must end with a checkpoint of step 2, its one line and exit status 75, no Ray signal dump.
Then the same command: it resumes at step 3 and trains only step 3, with the data order the first launch would have
had (each of the 6 rows once over the 3 steps). W&B (offline) continues the same run id; the Weave traces (to the
loopback W&B) of every step arrive exactly once across both launches. Two launches in all (seconds: the report).
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections import Counter
from pathlib import Path

import pytest

from recipes.harness import cpu_run
from recipes.preempt.request import EXIT_RESUMABLE

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1800)]
OVERRIDES = ("trainer.total_training_steps=3", "trainer.save_freq=3", "trainer.test_freq=-1",
             "trainer.val_before_train=false")
ROLLOUT_N, PROMPTS_PER_STEP = 2, 2  # config/profile/cpu_smoke.yaml
LAUNCH_TIMEOUT_S = 900


@pytest.fixture(scope="module")
def preempted(tmp_path_factory, mini_gsm8k_dir):
    from recipes.harness.standins.weave_http_server import loopback_wandb

    work = tmp_path_factory.mktemp("preempt")
    model, data = cpu_run.prepare(work, mini_gsm8k_dir)
    output = work / "outputs"
    with loopback_wandb() as wandb:
        env = cpu_run.environment(model, data, output, TRACE="on", LOGGER="console,wandb", WANDB_MODE="offline",
                                  WANDB_DIR=str(work), **wandb.env)
        env.pop("WEAVE_PRINT_CALL_LINK", None)
        runs = {}
        for name in ("stopped", "resumed"):
            log = work / f"{name}.log"
            start = time.monotonic()
            proc = cpu_run.start(env, log, *OVERRIDES)
            signal_at = None
            try:
                if name == "stopped":  # step 1's metrics line: step 2 is under way
                    cpu_run.wait_for(log, r"\bstep:1 - ", proc, LAUNCH_TIMEOUT_S)
                    os.kill(proc.pid, signal.SIGTERM)
                    signal_at = time.monotonic()
                status = proc.wait(timeout=LAUNCH_TIMEOUT_S)
            finally:
                cpu_run.kill_session(proc.pid)
            end = time.monotonic()
            checkpoints = output / "checkpoints"
            runs[name] = {"status": status, "log": log.read_text(errors="replace"), "wall_s": end - start,
                          "signal_to_exit_s": None if signal_at is None else end - signal_at,
                          "latest": (checkpoints / "latest_checkpointed_iteration.txt").read_text().strip(),
                          "saved": sorted(p.parent.name for p in checkpoints.glob("global_step_*/data.pt"))}
        calls = wandb.storage.recorded_calls()
    for name, run in runs.items():
        print(f"\n[preempt] {name}: exit {run['status']}, {run['wall_s']:.0f} s"
              + (f", signal to exit {run['signal_to_exit_s']:.1f} s" if run["signal_to_exit_s"] else ""))
    return output, runs, calls, work


def test_sigterm_mid_step_saves_the_step_and_says_the_same_command_resumes(preempted):
    output, runs, _, _ = preempted
    stopped = runs["stopped"]
    assert stopped["status"] == EXIT_RESUMABLE, f"exit {stopped['status']}:\n{stopped['log'][-5000:]}"
    checkpoints = output / "checkpoints"
    assert stopped["latest"] == "2", "the stopped launch's newest checkpoint is the step it was in"
    assert stopped["saved"] == ["global_step_2"], "one checkpoint, of step 2, with the dataloader state (data.pt)"
    assert (checkpoints / "global_step_2" / "actor").is_dir()
    assert cpu_run.steps(stopped["log"]) == [1, 2], "the stopped launch trains steps 1 and 2, then ends"
    assert _tracebacks_but_wandbs_exit(stopped["log"]) == [], "a stop raises nothing of the recipe's or verl's"
    lines = [line for line in stopped["log"].splitlines() if line.startswith("[launch] stopped (SIGTERM)")]
    assert lines == [f"[launch] stopped (SIGTERM) after step 2: checkpoint of step 2 in {checkpoints}/global_step_2; "
                     f"run the same command to resume at step 3 (exit status {EXIT_RESUMABLE})"], lines
    assert "SIGTERM received" not in stopped["log"], "Ray's signal dump: main_ppo was killed, not stopped"


def test_the_same_command_resumes_at_the_next_step_and_trains_only_the_rest(preempted):
    output, runs, _, _ = preempted
    resumed = runs["resumed"]
    assert resumed["status"] == 0, f"exit {resumed['status']}:\n{resumed['log'][-5000:]}"
    assert "Resuming from" in resumed["log"] and "global_step_2" in resumed["log"]
    assert cpu_run.steps(resumed["log"]) == [3]
    assert (output / "checkpoints" / "latest_checkpointed_iteration.txt").read_text().strip() == "3"


def test_every_row_is_trained_once_over_both_launches_in_one_data_order(preempted):
    output, _, _, _ = preempted
    prompts = {}
    for step in (1, 2, 3):
        rows = [json.loads(line) for line in (output / "rollouts" / f"{step}.jsonl").read_text().splitlines()]
        assert len(rows) == PROMPTS_PER_STEP * ROLLOUT_N, step
        prompts[step] = {row["input"] for row in rows}
        assert len(prompts[step]) == PROMPTS_PER_STEP, step
    seen = Counter(p for step_prompts in prompts.values() for p in step_prompts)
    assert len(seen) == 3 * PROMPTS_PER_STEP and set(seen.values()) == {1}, "a row trained twice: data order lost"


def test_wandb_continues_one_run_across_the_stop(preempted):
    output, _, _, work = preempted
    run_id = (output / "checkpoints" / "wandb_run_id").read_text().strip()
    runs = sorted(p.name for p in Path(work, "wandb").glob("offline-run-*"))
    assert len(runs) == 2 and all(name.endswith(f"-{run_id}") for name in runs), (run_id, runs)


def test_each_steps_traces_arrive_exactly_once_across_the_stop(preempted):
    _, _, calls, _ = preempted
    roots = [c for c in calls if c["parent_id"] is None and not c["attributes"].get("validate")]
    keys = Counter((c["attributes"]["step"], c["attributes"]["sample_index"], c["attributes"]["rollout_n"])
                   for c in roots)
    assert keys and set(keys.values()) == {1}, f"a trajectory traced twice: {keys}"
    assert {step for step, _, _ in keys} == {1, 2, 3}, sorted(keys)
    assert all(c["ended"] for c in roots)


def _tracebacks_but_wandbs_exit(log: str) -> list[str]:
    """Each traceback's first lines, except wandb's own at the TaskRunner's exit (its atexit teardown finds the
    wandb-core service gone after a stop: printed by wandb, nothing lost, left to wandb)."""
    lines = log.splitlines()
    starts = [i for i, line in enumerate(lines) if "Traceback (most recent call last)" in line]
    shown = ["\n".join(lines[i:i + 3]) for i in starts]
    return [text for text in shown if "wandb/sdk/lib/service/service_connection.py" not in text
            or "teardown_atexit" not in text]
