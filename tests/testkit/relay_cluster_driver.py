"""The driver side of tests/test_relay_per_node.py, in a process of its own (Ray keeps its connection settings per
process): joins the cluster, starts the relays as the launcher does, puts a tracing client on every node, and breaks
the relays from outside (scripts/relay_faults.py) while the clients trace. Prints one JSON line with what it saw.

    python -m testkit.relay_cluster_driver GCS SPOOL STEPS CALLS_PER_STEP HANG_AFTER_S STOP_S   (W&B: its env)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import asdict

CONFIG = {"trainer": {"experiment_name": "relay-per-node", "default_local_dir": "/shared/relay-per-node/checkpoints"}}


class TracingWorker:
    """Stands in for an agent-loop worker on one node: finds its node's relay as the recipe's worker does, then
    traces steps of calls through the real weave client, flushing after each."""

    def __init__(self, config: dict, env: dict) -> None:
        import ray

        os.environ.update(env)
        from recipes.trace_relay.client import use_trace_relay

        self.node = ray.get_runtime_context().get_node_id()
        self.relay = use_trace_relay(config)
        import weave

        self.client = weave.init("relay-per-node")

    def where(self) -> tuple[str, str | None]:
        return self.node, self.relay

    def step(self, number: int, calls: int) -> int:
        for i in range(calls):
            call = self.client.create_call("Rollout.run", {"node": self.node[:8], "step": number, "i": i})
            self.client.finish_call(call, output={"reward": 1.0})
        self.client.flush()
        return calls


def faults(*args: str) -> list[str]:
    from recipes.constants import REPO_ROOT

    return [sys.executable, str(REPO_ROOT / "scripts" / "relay_faults.py"), *args]


def main(argv: list[str]) -> int:
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from recipes.launch.relays import RelayPlan, start_relays
    from recipes.trace_relay.names import NAMESPACE, run_key

    gcs, spool, steps, per_step, hang_after_s, stop_s = argv
    steps, per_step, hang_after_s, stop_s = int(steps), int(per_step), float(hang_after_s), float(stop_s)
    wandb_env = {k: v for k, v in os.environ.items() if k.startswith(("WANDB_", "WF_", "WEAVE_"))}
    # the job's runtime env reaches every worker on every node (the keepers, their relays, the clients)
    ray.init(address=gcs, namespace=NAMESPACE, log_to_driver=False, runtime_env={"env_vars": wandb_env})
    relays, seen = None, {}
    try:
        nodes = sorted(n["NodeID"] for n in ray.nodes() if n["Alive"])
        relays = start_relays(RelayPlan(cluster=True, spool=spool, run=run_key(CONFIG), hang_after_s=hang_after_s))
        worker_class = ray.remote(num_cpus=0)(TracingWorker)
        workers = [worker_class.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False))
                   .remote(CONFIG, {"WANDB_ENTITY": wandb_env.get("WANDB_ENTITY", "")}) for node in nodes]
        seen["nodes"] = nodes
        seen["where"] = ray.get([w.where.remote() for w in workers], timeout=180)
        seen["relays_found"] = [json.loads(line) for line in subprocess.run(
            faults("list", "--spool-base", spool), capture_output=True, text=True, check=True).stdout.splitlines()]
        ray.get([w.step.remote(1, per_step) for w in workers], timeout=120)
        injector = subprocess.Popen(faults("inject", "--spool-base", spool, "--kill", "1", "--stop", "1",
                                           "--stop-seconds", str(stop_s), "--timeout", "120"),
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(1.0)  # the faults are in: the next steps go to a dead and a stopped relay
        for number in range(2, steps + 1):
            ray.get([w.step.remote(number, per_step) for w in workers], timeout=240)
        out, err = injector.communicate(timeout=180)
        seen["injector"] = json.loads(out) if injector.returncode == 0 else {"error": err}
        seen["made"] = len(nodes) * steps * per_step
    finally:
        seen["summaries"] = [asdict(s) for s in relays.stop()] if relays is not None else []
        ray.shutdown()
        print(json.dumps(seen), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
