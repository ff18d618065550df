"""The smoke's tracing-failure variant: exactly one agent-loop worker whose `weave.init` fails, the others trace.

`CPU_SMOKE_UNTRACED_AGENT_LOOP_WORKER=<i>` (unset: off) picks verl's agent-loop worker i (Ray actor
`agent_loop_worker_<i>_<uuid>`, verl/experimental/agent_loop/agent_loop.py `_init_agent_loop_workers`). A test
adds this module to `VERL_USE_EXTERNAL_MODULES` (FAULT_MODULE), so it runs when that worker process imports verl,
before the recipe's worker
(recipes/gsm8k/worker.py) runs its weave.init guard: this one process is pointed at a closed port on
127.0.0.1, as a node whose W&B (or trace relay) is unreachable, so its real weave.init fails, and the recipe's
guard must switch its tracing off while the run trains on. Stands in for a network fault, nothing else.
"""

from __future__ import annotations

import os
import socket

from recipes.trace_relay.names import TRACE_RELAY_ENV  # light: no verl, which is mid-import here

UNTRACED_WORKER_ENV = "CPU_SMOKE_UNTRACED_AGENT_LOOP_WORKER"
FAULT_MODULE = __name__  # what a test appends to VERL_USE_EXTERNAL_MODULES (tests/ on PYTHONPATH)
# How long the failing worker's guard waits for weave.init (recipes/tracing/guard.py reads it at import).
INIT_TIMEOUT_ENV, INIT_TIMEOUT_S = "GSM8K_RECIPE_TRACE_INIT_TIMEOUT", "20"


def _closed_port() -> int:
    """A port nothing listens on: bound by us, then released."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def this_actor_name() -> str | None:
    try:
        import ray

        return ray.get_runtime_context().get_actor_name() if ray.is_initialized() else None
    except Exception:  # not a Ray worker, or no actor in it
        return None


def break_weave_in_this_worker() -> bool:
    """Point this process's weave at a closed port if it is the chosen agent-loop worker; True if it is."""
    index = os.environ.get(UNTRACED_WORKER_ENV, "").strip()
    name = this_actor_name() if index else None
    if not name or not name.startswith(f"agent_loop_worker_{index}_"):
        return False
    url = f"http://127.0.0.1:{_closed_port()}"
    os.environ.pop(TRACE_RELAY_ENV, None)  # no relay for this worker either: it must reach W&B itself, and cannot
    os.environ["WANDB_BASE_URL"] = url
    os.environ["WF_TRACE_SERVER_URL"] = url + "/traces"
    os.environ.setdefault(INIT_TIMEOUT_ENV, INIT_TIMEOUT_S)
    print(f"[cpu-smoke] {name}: weave pointed at closed port {url} ({UNTRACED_WORKER_ENV}={index}): "
          "its weave.init must fail and its tracing go off", flush=True)
    return True


break_weave_in_this_worker()
