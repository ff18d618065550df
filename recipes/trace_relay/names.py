"""The names a trace relay and its clients agree on: the environment that tells a worker its node's relay, the
relay's own route, and how one run's relay keepers are named on a Ray cluster (what the launcher names them and each
agent-loop worker looks up, recipes/trace_relay/client.py, without importing the keepers themselves)."""

from __future__ import annotations

import hashlib

# The environment variable through which the launcher tells every worker its node's trace relay (the relay's URL).
TRACE_RELAY_ENV = "GSM8K_RECIPE_TRACE_RELAY"
# ... and the run's secret that the relay's clients present (a random token per launch; never on a command line).
TRACE_RELAY_TOKEN_ENV = "GSM8K_RECIPE_TRACE_RELAY_TOKEN"
# The trace relay's own route: its keeper and the workers ask it whether THIS node's relay answers.
RELAY_HEALTH_PATH = "/trace_relay/health"

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
