"""Every node's sample for a stall report, taken at the same time: this node's main_ppo tree by the launcher, and on
a Ray cluster each node's raylet tree (every worker of that node: agent-loop workers, rollout servers, training
ranks, reward and tool code) by a Ray task pinned to that node, so that py-spy reads each process where it runs.

The cluster part runs in a child process (`python -m recipes.watchdog.cluster`) with a deadline: a cluster too
wedged to start a task on some node cannot hang the launcher, and the report then says which node did not answer.
The task's code travels by value (recipes/watchdog/sample.py needs only psutil and py-spy on the node).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import threading

from recipes.watchdog.sample import sample_node

CLUSTER_EXTRA_S = 120.0  # beyond the window: joining the cluster, starting a worker on every node


def gather(main_ppo_pid: int, window_s: float, samples: int, cluster_address: str | None,
           launcher_pid: int | None = None) -> tuple[list[dict], list[str]]:
    """(node records, errors): this node's main_ppo tree; with `cluster_address`, every node of that cluster too."""
    local: dict = {}
    launcher_pid = os.getpid() if launcher_pid is None else launcher_pid

    def here() -> None:
        local.update(sample_node([main_ppo_pid], {launcher_pid}, window_s, samples))

    thread = threading.Thread(target=here, name="stall-sample", daemon=True)
    thread.start()
    nodes, errors = ([], []) if cluster_address is None else \
        _cluster(cluster_address, window_s, samples, launcher_pid, main_ppo_pid)
    thread.join()
    if not local:
        return nodes, errors + ["this node: the sampling of main_ppo's processes failed"]
    local["label"], local["local"] = f"{local['host']} (the launcher's node: main_ppo's processes)", True
    on_cluster = {(n["host"], p["pid"]) for n in nodes for p in n["processes"]}
    local["processes"] = [p for p in local["processes"] if (local["host"], p["pid"]) not in on_cluster]
    return [local, *nodes], errors


def _cluster(address: str, window_s: float, samples: int, launcher_pid: int,
             main_ppo_pid: int) -> tuple[list[dict], list[str]]:
    command = [sys.executable, "-m", "recipes.watchdog.cluster", "--address", address, "--window", str(window_s),
               "--samples", str(samples), "--host", socket.gethostname(), "--launcher", str(launcher_pid),
               "--main-ppo", str(main_ppo_pid)]
    deadline = window_s + CLUSTER_EXTRA_S
    try:
        proc = subprocess.run(command, capture_output=True, text=True, timeout=deadline, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return [], [f"the Ray cluster at {address} did not answer in {deadline:g} s: no stacks from other nodes"]
    try:
        got = json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        tail = " | ".join(proc.stderr.strip().splitlines()[-3:])
        return [], [f"sampling the Ray cluster at {address} failed (exit {proc.returncode}): {tail}"]
    return got["nodes"], got["errors"]


def _on_every_node(address: str, window_s: float, samples: int, host: str, launcher: int, main_ppo: int) -> dict:
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from recipes.watchdog import sample

    ray.cloudpickle.register_pickle_by_value(sample)  # the nodes need not import the recipe
    ray.init(address=address, log_to_driver=False, logging_level="ERROR", configure_logging=False)

    @ray.remote(num_cpus=0, max_retries=0)
    def on_node(node_id: str) -> dict:
        mine = sample.launcher_side(launcher, main_ppo) if socket.gethostname() == host else set()
        raylet = sample.raylet_pid()
        record = sample.sample_node([raylet] if raylet else [], mine, window_s, samples)
        record["label"] = f"node {record['ip']} ({node_id[:8]})"
        if raylet is None:
            record["errors"].append("no raylet above this worker: its node's processes could not be found")
        return record

    alive = [n for n in ray.nodes() if n.get("Alive")]
    refs = {on_node.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)).remote(
        n["NodeID"]): n for n in alive}
    ready, _ = ray.wait(list(refs), num_returns=len(refs), timeout=window_s + CLUSTER_EXTRA_S / 2)
    nodes, errors = [], []
    for ref, node in refs.items():
        where = f"node {node.get('NodeManagerAddress')} ({node['NodeID'][:8]})"
        if ref not in ready:
            errors.append(f"{where} did not answer in time: no stacks from it")
            continue
        try:
            nodes.append(ray.get(ref))
        except Exception as err:
            errors.append(f"{where}: {type(err).__name__}: {str(err)[:300]}")
    return {"nodes": nodes, "errors": errors}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--address", required=True)
    parser.add_argument("--window", type=float, required=True)
    parser.add_argument("--samples", type=int, required=True)
    parser.add_argument("--host", required=True, help="the launcher's host, where --launcher and --main-ppo run")
    parser.add_argument("--launcher", type=int, required=True, help="left out with all it started but main_ppo")
    parser.add_argument("--main-ppo", type=int, required=True)
    args = parser.parse_args(argv)
    print(json.dumps(_on_every_node(args.address, args.window, args.samples, args.host, args.launcher,
                                    args.main_ppo)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
