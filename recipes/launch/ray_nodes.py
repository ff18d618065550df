"""`python -m recipes.launch.ray_nodes ADDRESS N`: wait until a Ray cluster at ADDRESS has N alive nodes (exit 0),
for a batch script that starts the nodes itself (scripts/run_gsm8k_grpo.sbatch) before the launcher joins: verl
checks the cluster's GPUs once, when main_ppo starts. Bound it with `timeout`; it polls every 2 s."""

from __future__ import annotations

import sys
import time

POLL_S = 2.0


def alive_nodes(address: str) -> int:
    import ray

    ray.init(address=address, logging_level="ERROR", log_to_driver=False)
    try:
        return sum(1 for node in ray.nodes() if node.get("Alive"))
    finally:
        ray.shutdown()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2 or not argv[1].isdigit():
        print("usage: python -m recipes.launch.ray_nodes ADDRESS NODES", file=sys.stderr)
        return 2
    address, wanted = argv[0], int(argv[1])
    while True:
        try:
            alive = alive_nodes(address)
        except Exception as err:  # the head is not up yet: Ray raises ConnectionError and others
            alive, why = 0, f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
        else:
            why = ""
        if alive >= wanted:
            print(f"[ray_nodes] {alive} of {wanted} Ray node(s) alive at {address}", file=sys.stderr)
            return 0
        print(f"[ray_nodes] {alive} of {wanted} Ray node(s) alive at {address} {why}".rstrip(), file=sys.stderr)
        time.sleep(POLL_S)


if __name__ == "__main__":
    sys.exit(main())
