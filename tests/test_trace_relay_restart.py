"""A relay that dies mid-run loses no trace: it is started again on the same address, which stays open meanwhile.

Real processes: two weave clients trace steps of calls through the relay and flush after each (as the
agent-loop workers do); the relay is killed with SIGKILL mid-run and stays down longer than weave's retry
window; every call must reach the W&B stand-in (testkit.weave_http_server), exactly once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import httpx
import pytest

from recipes.trace_relay.protocol import RELAY_HEALTH_PATH
from recipes.tracing import TRACE_RELAY_ENV
from testkit.relay_process import RelayProcess
from testkit.weave_http_server import API_KEY, loopback_wandb

pytestmark = pytest.mark.timeout(120)

CLIENTS, STEPS, CALLS_PER_STEP = 2, 6, 20
KILL_AFTER_STEPS = 2
RESTART_DELAY_S = 2.0  # the supervisor's first restart delay: alone longer than the window below

CLIENT = """
import os, sys, time
from recipes.tracing import use_trace_relay
assert use_trace_relay(), "the relay did not answer at start"
import weave
client = weave.init("relay-restart")
name, steps, per_step, progress = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
for step in range(steps):
    for i in range(per_step):
        client.finish_call(client.create_call("Rollout.run", {"worker": name, "step": step, "i": i}),
                           output={"reward": 1.0})
    client.flush()  # the worker's per-step flush: a batch that fails one retry cycle here is dropped
    with open(progress, "w") as f:
        f.write(str(step + 1))
    time.sleep(0.1)
os._exit(0)  # as a Ray worker ends: no atexit
"""


def weave_retry_window_s() -> float:
    """The longest a client keeps retrying a refused request with WEAVE_RETRY_MAX_ATTEMPTS=1: only the HTTP
    client's own retries, 0.5 s then 1 s (weave/vendor/weave_server_sdk/_base_client.py, before jitter that
    only shortens them). At weave's defaults (3 attempts, waits of 1-2 s and 2-3 s between) it is ~9.5 s."""
    from weave.vendor.weave_server_sdk._constants import DEFAULT_MAX_RETRIES, INITIAL_RETRY_DELAY, MAX_RETRY_DELAY

    return sum(min(INITIAL_RETRY_DELAY * 2**n, MAX_RETRY_DELAY) for n in range(DEFAULT_MAX_RETRIES))


def test_a_relay_killed_mid_run_is_restarted_on_its_address_and_loses_nothing(repo_root, tmp_path):
    window = weave_retry_window_s()
    with loopback_wandb() as wandb:
        relay = RelayProcess(tmp_path / "spool", "--max-retry-interval", "1", "--restart-delay", str(RESTART_DELAY_S),
                             WANDB_BASE_URL=wandb.url, WANDB_API_KEY=API_KEY)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("WANDB", "WF_", "WEAVE"))}
        env.update({TRACE_RELAY_ENV: relay.url, "WANDB_ENTITY": wandb.entity, "PYTHONPATH": str(repo_root),
                    "WEAVE_PRINT_CALL_LINK": "false", "WANDB_ERROR_REPORTING": "false",
                    "WEAVE_RETRY_MAX_ATTEMPTS": "1"})  # weave's documented knob: its shortest retry window
        progress = [tmp_path / f"client{n}.progress" for n in range(CLIENTS)]
        clients = [subprocess.Popen([sys.executable, "-c", CLIENT, f"w{n}", str(STEPS), str(CALLS_PER_STEP),
                                     str(progress[n])], env=env, cwd=repo_root, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, text=True) for n in range(CLIENTS)]
        try:
            deadline = time.monotonic() + 60
            while not all(p.exists() and int(p.read_text() or 0) >= KILL_AFTER_STEPS for p in progress):
                assert time.monotonic() < deadline and all(c.poll() is None for c in clients), "clients stalled"
                time.sleep(0.05)
            killed = relay.serving_pid
            os.kill(killed, signal.SIGKILL)
            killed_at = time.monotonic()
            steps_at_kill = [int(p.read_text()) for p in progress]
            downtime = None
            try:  # waits in the socket's backlog while no relay runs; answered by the next relay
                httpx.get(relay.url + RELAY_HEALTH_PATH, timeout=30).raise_for_status()
                downtime = time.monotonic() - killed_at
            except httpx.HTTPError:
                pass
            outputs = [c.communicate(timeout=60)[0] for c in clients]
            made = CLIENTS * STEPS * CALLS_PER_STEP
            received = wandb.wait_for_calls(made, timeout_s=20)
        finally:
            for c in clients:
                if c.poll() is None:
                    c.kill()
            summary = relay.stop()
    print(f"relay killed after steps {steps_at_kill} of {STEPS}, down {downtime or 0:.1f} s (weave's retry window "
          f"here {window:.1f} s): {made} calls made, {len(received)} received")
    assert len(received) == made, f"{made - len(received)} of {made} calls lost\n{summary}\n{outputs[0][-1500:]}"
    assert all(c.returncode == 0 for c in clients), [o[-1500:] for o in outputs]
    assert downtime is not None and downtime > window, downtime
    assert max(steps_at_kill) < STEPS  # the clients were still tracing when it died
    assert set(wandb.app.call_starts_received.values()) == {1}  # exactly once
    assert relay.serving_pid != killed
    restart = next(line for line in summary.splitlines() if "trace relay supervisor:" in line)
    assert f"the relay (pid {killed}) was killed by SIGKILL" in restart and f"restarting it on {relay.url}" in restart
    assert relay.process.returncode == 0 and summary.splitlines()[-1].endswith(", 0 pending"), summary
