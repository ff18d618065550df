"""Failure isolation: a weave.init that fails (no key, W&B unreachable, a server that disables this weave) turns
tracing off with one warning instead of killing the agent-loop worker."""

from __future__ import annotations

import logging
import os
import threading
from typing import Any

from recipes.credentials import has_wandb_credentials
from recipes.trace_relay.client import quiet_call_links

logger = logging.getLogger(__name__)

INIT_TIMEOUT_S = float(os.environ.get("GSM8K_RECIPE_TRACE_INIT_TIMEOUT", "120"))


def guard_trace_init() -> None:
    """Make RolloutTraceConfig.init survive weave.init failing (tracing goes off, training goes on), and
    keep weave from logging a link per traced call (quiet_call_links).

    The recipe's agent-loop worker (recipes/gsm8k/worker.py) calls this before verl's
    AgentLoopWorker.__init__ runs RolloutTraceConfig.init.
    """
    from verl.utils.rollout_trace import RolloutTraceConfig

    original = RolloutTraceConfig.__dict__["init"].__func__
    if getattr(original, "_recipe_guarded", False):
        return

    def guarded_init(cls, project_name, experiment_name, backend, token2text=False,
                     max_samples_per_step_per_worker=None):
        if backend == "weave":
            quiet_call_links()  # here, in the worker process: the launcher's environment may not reach it
            if not _weave_ready(project_name):
                backend = None
        return original(cls, project_name, experiment_name, backend, token2text, max_samples_per_step_per_worker)

    guarded_init._recipe_guarded = True
    RolloutTraceConfig.init = classmethod(guarded_init)


def _weave_ready(project_name: str) -> bool:
    """Run weave.init with a time limit; on any failure warn once and report tracing as unavailable."""
    try:
        from weave.trace.context import weave_client_context
    except ImportError:
        logger.warning("Weave tracing is OFF for this run: weave is not installed in this worker "
                       "(bash scripts/install_gpu_env.sh installs it), or set TRACE=off.")
        return False

    current = weave_client_context.get_weave_client()
    if current is not None:  # already initialised in this process
        return _usable(current, project_name)
    if not has_wandb_credentials():
        logger.warning("Weave tracing is OFF for this run: no WANDB_API_KEY (or `wandb login`) in this worker. "
                       "Training continues; set the key to get traces, or TRACE=off to silence this.")
        return False
    outcome: dict[str, Any] = {}

    def attempt() -> None:
        try:
            import weave

            outcome["client"] = weave.init(project_name)
        except BaseException as err:  # weave raises transport errors, SystemExit on bad keys, ...
            outcome["error"] = err

    thread = threading.Thread(target=attempt, name="weave-init", daemon=True)
    thread.start()
    thread.join(INIT_TIMEOUT_S)
    if "client" in outcome:
        return _usable(outcome["client"], project_name)
    reason = f"{type(outcome['error']).__name__}: {outcome['error']}" if "error" in outcome else (
        f"no answer from W&B within {INIT_TIMEOUT_S:.0f} s")
    logger.warning("Weave tracing is OFF for this run: weave.init(%r) failed (%s). Training continues without "
                   "traces; check network access to W&B, or set TRACE=off.", project_name, reason)
    return False


def _usable(client: Any, project_name: str) -> bool:
    """weave.init returns a client that silently records nothing when the trace server requires a newer weave
    (weave/trace/init_message.py) or WEAVE_DISABLED is set: count that as tracing off, and say so."""
    if getattr(client, "entity", None) != "DISABLED":
        return True
    logger.warning("Weave tracing is OFF for this run: weave.init(%r) returned a disabled client (the trace server "
                   "requires a newer weave: see weave's warning above and `pip install -U weave`; or WEAVE_DISABLED "
                   "is set). Training continues without traces.", project_name)
    return False
