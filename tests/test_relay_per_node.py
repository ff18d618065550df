"""A trace relay on every node of a real Ray cluster of two nodes (two raylets on 127.0.0.1, tests/conftest.py), as
the launcher starts them (recipes/launch/relays.py: a NodeRelayKeeper actor pinned to each node). On each node a
weave client in a Ray actor finds its node's relay by name (recipes.trace_relay.client.use_trace_relay, from the
config) and
traces through it to a loopback W&B, flushing after each step as the agent-loop workers do. Then, from outside and by
command line as a check would (scripts/relay_faults.py), one node's relay is SIGKILLed and the other's SIGSTOPped
for longer than weave's retry window while the clients go on tracing. Every call must arrive exactly once, each
relay must be replaced on its own node, and the end-of-run summary must say so per node. The driver runs in a
process of its own (tests/testkit/relay_cluster_driver.py)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from harness.standins.weave_http_server import API_KEY, loopback_wandb
from recipes.trace_relay.on_ray import NodeSummary
from testkit.launcher import clean_environ

pytestmark = [pytest.mark.integration, pytest.mark.timeout(400)]

STEPS, CALLS_PER_STEP = 5, 10
HANG_AFTER_S = 3.0  # the keepers' bound on a relay that answers nothing (15 s by default)
STOP_S = 12.0  # the stopped relay stays stopped longer than weave's retry window (~9.5 s at its defaults)


def test_every_node_keeps_its_traces_through_a_relay_that_is_replaced_on_that_node(ray_cluster, tmp_path):
    with loopback_wandb() as wandb:
        env = {**clean_environ(), **ray_cluster["env"], **wandb.env, "WANDB_API_KEY": API_KEY}
        proc = subprocess.run([sys.executable, "-m", "testkit.relay_cluster_driver", ray_cluster["gcs"],
                               str(tmp_path / "spool"), str(STEPS), str(CALLS_PER_STEP), str(HANG_AFTER_S),
                               str(STOP_S)], env=env, capture_output=True, text=True, timeout=360)
        assert proc.returncode == 0 and proc.stdout.strip(), proc.stderr[-4000:]
        seen = json.loads(proc.stdout.strip().splitlines()[-1])
        made = seen["made"]
        received = wandb.wait_for_calls(made, timeout_s=60)
    summaries = [NodeSummary(**s) for s in seen["summaries"]]
    faults = seen["injector"]["faults"]
    repeats = sum(count - 1 for count in wandb.app.call_starts_received.values())
    print(f"two nodes, relay SIGKILLed on one and SIGSTOPped {STOP_S:.0f} s on the other: {made} calls made, "
          f"{len(received)} received, {repeats} received twice; faults {faults}; "
          + "; ".join(s.line() for s in summaries))
    # each client on its own node, through a relay of its own node: two relays, two addresses, two processes
    assert [node for node, _ in seen["where"]] == seen["nodes"] and len({url for _, url in seen["where"]}) == 2
    assert len(seen["relays_found"]) == 2, seen["relays_found"]
    assert len(received) == made, f"{made - len(received)} of {made} calls lost"
    assert set(wandb.app.call_starts_received.values()) == {1}  # exactly once
    # each fault hit a different node, and that node's relay was replaced there (another pid serving its spool)
    assert sorted(f["signal"] for f in faults.values()) == ["SIGKILL", "SIGSTOP"]
    assert all(f.get("new_pid") not in (None, f["pid"]) for f in faults.values()), faults
    stopped = next(node for node, f in faults.items() if f["signal"] == "SIGSTOP")
    assert faults[stopped]["still_there_after_stop"] is False  # its keeper ended it, it did not wait to be resumed
    by_node = {s.node: s for s in summaries}
    assert set(by_node) == set(faults), (by_node, faults)
    assert all(s.pending == 0 and s.replaced >= 1 and s.status == 0 for s in summaries), [s.line() for s in summaries]
    assert by_node[stopped].hangs >= 1


def test_a_keeper_that_died_while_starting_is_asked_again_until_it_answers(monkeypatch):
    """Ray restarts a keeper whose process died while starting (max_restarts=-1) and says it is unavailable
    meanwhile: the launch asks again until its deadline instead of failing (seen once under a loaded CI-like run)."""
    import time

    import ray
    from ray.exceptions import RayActorError

    from recipes.trace_relay.on_ray import ClusterRelays

    answers = [RayActorError(), RayActorError(), True]

    def get(ref):  # stands in for ray.get on the keeper's wait_ready: unavailable twice, then ready
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    class Handle:  # stands in for the keeper's actor handle
        class wait_ready:  # noqa: N801 - the actor method's name
            @staticmethod
            def remote(timeout_s):
                return timeout_s

    relays = ClusterRelays.__new__(ClusterRelays)
    relays.keepers = {"node-a": Handle}
    monkeypatch.setattr(ray, "get", get)
    monkeypatch.setattr(time, "sleep", lambda s: None)
    assert relays._answers("node-a", time.monotonic() + 60) is True and answers == []
    answers[:] = [RayActorError()] * 3
    assert relays._answers("node-a", time.monotonic() - 1) is False  # past its deadline: the launch says which node
