"""How one run's trace relay keepers are named on a Ray cluster: what the launcher names them and each agent-loop
worker looks up (recipes/tracing/relay_client.py) without importing the keepers themselves."""

from __future__ import annotations

import hashlib

NAMESPACE = "gsm8k_recipe"  # Ray namespace of the keepers, whichever driver (launcher, main_ppo) looks
KEEPER_ANSWER_S = 30.0  # a keeper that does not answer a status call this long is killed (Ray restarts it)
WORKER_WAIT_S = 120.0  # a worker on a node that just joined waits this long for its node's keeper


def run_key(config) -> str:
    """What names one run's keepers, computed alike by the launcher and by every worker from the config they get:
    the experiment and its checkpoint folder (two runs that share those would overwrite each other anyway)."""
    trainer = config["trainer"]
    text = f"{trainer['experiment_name']}\0{trainer['default_local_dir']}"
    return hashlib.sha1(text.encode()).hexdigest()[:12]


def keeper_name(run: str, node_id: str) -> str:
    return f"{run}/{node_id}"


def node_label(node_id: str, ip: str) -> str:
    """The node's folder under the spool base: its address and the start of its Ray node id (two nodes of one
    machine, as in the CPU smoke, differ by the id)."""
    return f"{ip}_{node_id[:8]}"
