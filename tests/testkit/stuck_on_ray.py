"""A stalled run on a real Ray cluster, for the stall report's multi-node test: a driver (as main_ppo) with one actor
pinned to each node, the first held inside its method in the run's own code (testkit.stuck_processes.hold_the_loop,
as a tool or a rank that never returns), the others idle (a test stops one from outside).

    python -m testkit.stuck_on_ray GCS READY_FILE

READY_FILE (JSON, once every actor is in place): [{"node": node id, "pid": actor pid, "held": bool}, ...]. Runs until
killed.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time


class Pinned:
    def where(self) -> tuple[str, int]:
        import ray

        return ray.get_runtime_context().get_node_id(), os.getpid()

    def hold(self) -> None:
        from testkit.stuck_processes import hold_the_loop

        hold_the_loop()


def main(gcs: str, ready_file: str) -> None:
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    ray.init(address=gcs, log_to_driver=False)
    nodes = sorted(n["NodeID"] for n in ray.nodes() if n["Alive"])
    actor = ray.remote(num_cpus=0)(Pinned)
    actors = [actor.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False)).remote()
              for node in nodes]
    where = ray.get([a.where.remote() for a in actors])
    held = actors[0].hold.remote()  # noqa: F841  never returns
    time.sleep(1.0)  # the method is running by now
    record = [{"node": node, "pid": pid, "held": i == 0} for i, (node, pid) in enumerate(where)]
    with open(f"{ready_file}.tmp", "w") as f:
        json.dump(record, f)
    os.replace(f"{ready_file}.tmp", ready_file)
    threading.Event().wait()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
