"""The worker side of the node's trace relay (recipes/trace_relay): point this process's weave at the relay of its
node, found from the launcher's environment (one node) or by name on a Ray cluster, and keep weave quiet there."""

from __future__ import annotations

import logging
import os
import time
from typing import Any

from recipes.trace_relay.keeper import relay_answers

# the launcher's relay URL and the launch's token (one node: in the environment)
from recipes.trace_relay.names import (
    KEEPER_ANSWER_S,
    NAMESPACE,
    TRACE_RELAY_ENV,
    TRACE_RELAY_TOKEN_ENV,
    WORKER_WAIT_S,
    keeper_name,
    run_key,
)

logger = logging.getLogger(__name__)

RELAYED_RETRY_ATTEMPTS = "6"  # weave's WEAVE_RETRY_MAX_ATTEMPTS for a client of a relay, unless set


def use_trace_relay(config: Any = None) -> str | None:
    """If the launcher runs a trace relay for this process's node, point THIS process's weave at it (GraphQL and
    trace server) and return its URL. Only here: the wandb metrics logger in the trainer keeps talking to W&B.

    Where the relay is, and the run's token it asks of its clients (weave sends it as its API key: the relay holds the
    W&B key itself, and this process needs none): on one node, the launcher hands both down in TRACE_RELAY_ENV and
    TRACE_RELAY_TOKEN_ENV; on a Ray cluster, the keeper of this worker's node, found by name (node_relay below) from
    the run the trainer `config` names, answers both. A worker whose relay does not answer traces straight to W&B,
    as without a relay: the per-step flush still sends what a step traced, but an outage longer than weave's retries
    loses calls."""
    url = (os.environ.get(TRACE_RELAY_ENV) or "").rstrip("/")
    token = os.environ.get(TRACE_RELAY_TOKEN_ENV) or ""
    if not url and config is not None:
        url, token = _node_relay(config) or ("", "")
    if not url:
        return None
    if not token:
        logger.warning("Trace relay %s came without the run's token (%s): tracing straight to W&B instead.", url,
                       TRACE_RELAY_TOKEN_ENV)
        return None
    if not relay_answers(url, token, timeout_s=5.0):
        logger.warning("Trace relay %s does not answer from this process's node: tracing straight to W&B "
                       "instead (traces made while W&B is unreachable may be lost).", url)
        return None
    os.environ["WANDB_BASE_URL"] = url
    os.environ["WF_TRACE_SERVER_URL"] = url + "/traces"
    os.environ["WANDB_API_KEY"] = token  # weave presents it to the relay; the W&B key stays with the relay
    os.environ["WANDB_ERROR_REPORTING"] = "false"  # Sentry would try to leave an air-gapped node
    os.environ["WEAVE_USE_SERVER_CACHE"] = "false"  # its cache is keyed without the server URL (facts doc)
    # weave gives a refused request ~10 s (3 attempts); a relay keeper that Ray starts again takes longer: ~30 s
    os.environ.setdefault("WEAVE_RETRY_MAX_ATTEMPTS", RELAYED_RETRY_ATTEMPTS)
    try:
        from weave.trace import init_message

        # weave.init asks PyPI for a newer weave (3 s timeout, DNS not bounded) and offers no switch
        init_message._print_version_check = lambda: None
        # "View Weave data at <relay URL>" would name a loopback port gone after the run; the launcher says
        # once where the traces are in W&B (recipes/tracing/location.py)
        init_message.print_init_message = lambda *args, **kwargs: None
    except ImportError:
        pass
    return url


def quiet_call_links() -> None:
    """No per-call `weave: 🍩 <url>` lines from this process, unless the user asked for them.

    weave logs one link per root call (weave/trace/weave_client.py:262-264, from create_call or finish_call)
    unless WEAVE_PRINT_CALL_LINK is false: at the recipe's defaults that is one line per traced trajectory,
    hundreds per step, and through the relay each names a loopback port gone after the run. Each line shows
    twice: weave's logger has its own handler and still propagates to the root handler `import verl` adds.
    The environment variable is the only setting that holds here: weave.init keeps its settings in a
    ContextVar, and the recipe runs weave.init in a thread of its own, so they never reach the rollouts."""
    if not os.environ.get("WEAVE_PRINT_CALL_LINK"):  # weave reads an empty value as unset
        os.environ["WEAVE_PRINT_CALL_LINK"] = "false"


def _node_relay(config: Any) -> tuple[str, str] | None:
    """This node's relay on a Ray cluster (its URL and the run's token), if the launcher started relays there for
    this run."""
    try:
        import ray

        found = node_relay(run_key(config))
        url = found[0] if found else None
        if url:  # one line per worker in the run's log: which node it is on, whose relay it uses
            node = ray.get_runtime_context().get_node_id()
            print(f"[traces] agent-loop worker pid {os.getpid()} on node {node[:8]}: tracing through that node's "
                  f"relay {url}", flush=True)
        return found
    except Exception as err:  # never fail a worker over tracing
        logger.warning("Looking up this node's trace relay failed: %s: %s", type(err).__name__, err)
        return None


def node_relay(run: str, wait_s: float = WORKER_WAIT_S) -> tuple[str, str] | None:
    """In a Ray worker: the URL of this node's relay for `run` and the run's token, or None when the run has no relays
    on the cluster (one node, where the launcher hands both down; or TRACE_RELAY=off)."""
    import ray

    if not ray.is_initialized():
        return None
    node_id = ray.get_runtime_context().get_node_id()
    deadline = time.monotonic() + wait_s
    while True:
        try:
            handle = ray.get_actor(keeper_name(run, node_id), namespace=NAMESPACE)
            return tuple(ray.get(handle.connection.remote(), timeout=KEEPER_ANSWER_S))
        except ValueError:  # no keeper of this name (yet)
            if not _run_has_keepers(run):
                return None
            if time.monotonic() > deadline:
                logger.warning("no trace relay for this node (%s) within %.0f s, though the run has relays on other "
                               "nodes", node_id[:8], wait_s)
                return None
            time.sleep(2.0)  # a node that joined after the launch: the launcher starts its keeper shortly
        except Exception as err:  # the keeper is being started again: ask once more
            if time.monotonic() > deadline:
                logger.warning("this node's trace relay keeper did not answer: %s: %s", type(err).__name__, err)
                return None
            time.sleep(2.0)


def _run_has_keepers(run: str) -> bool:
    import ray

    return any(actor.get("namespace") == NAMESPACE and actor.get("name", "").startswith(f"{run}/")
               for actor in ray.util.list_named_actors(all_namespaces=True))
