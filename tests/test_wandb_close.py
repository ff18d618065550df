"""The end of training closes W&B while its service still answers (recipes/trainer/trainer.py): when Ray ends the
TaskRunner, wandb-core, its child, goes first, and wandb's own atexit teardown then prints a ConnectionResetError
traceback after every run that logged to W&B. A real offline wandb run in a real process whose service is killed
before it exits, as Ray's shutdown does it."""

import subprocess
import sys
import textwrap

import pytest

from recipes.constants import REPO_ROOT

pytestmark = pytest.mark.integration

CHILD = textwrap.dedent("""
    import sys
    import psutil
    import wandb
    run = wandb.init(project="recipe-test", mode="offline", dir=sys.argv[2])
    run.log({"step_metric": 1.0})
    if sys.argv[1] != "left to exit":
        from recipes.trainer.trainer import _finish_wandb_run
        _finish_wandb_run(preempting=sys.argv[1] == "stopped")
    children = psutil.Process().children(recursive=True)
    for child in children:  # wandb-core ends first, as under Ray's shutdown
        child.kill()
    psutil.wait_procs(children, timeout=30)  # gone, its socket closed, before this process exits
    print("exiting", flush=True)
""")


def _exit_output(how: str, tmp_path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", CHILD, how, str(tmp_path)], cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=120, env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path),
                                                        "WANDB_ERROR_REPORTING": "false", "PYTHONPATH": str(REPO_ROOT)})


def test_left_to_exit_wandb_prints_a_traceback_once_its_service_is_gone(tmp_path):
    """What the recipe guards against, so the test below can fail."""
    proc = _exit_output("left to exit", tmp_path)
    assert "exiting" in proc.stdout and "Traceback (most recent call last)" in proc.stderr, proc.stderr[-2000:]


@pytest.mark.parametrize("how", ["finished", "stopped"])
def test_a_run_closed_at_the_end_of_training_exits_quietly(how, tmp_path):
    proc = _exit_output(how, tmp_path)
    assert proc.returncode == 0 and "exiting" in proc.stdout, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr and "warning" not in proc.stdout, proc.stderr[-2000:]
    runs = list(tmp_path.glob("wandb/offline-run-*/run-*.wandb"))
    assert len(runs) == 1 and runs[0].stat().st_size > 0, runs
