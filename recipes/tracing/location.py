"""Where a run's Weave traces can be opened: said once by the launcher, instead of a link per traced call from
every agent-loop worker (recipes.trace_relay.client.quiet_call_links)."""

from __future__ import annotations

import os
from urllib.parse import quote

from recipes.credentials import wandb_base_url
from recipes.trace_relay.spool import UPLOAD_COMMAND

ENTITY_PLACEHOLDER = "<your W&B entity>"


def weave_project_url(project: str, entity: str | None = None) -> str:
    """The project's Weave page, the link weave itself prints: the W&B app serving WANDB_BASE_URL's API. Built
    here without importing weave: the import starts weave's error reporting, which calls out to its service from
    a preflight or dry run that was asked for no network. Without WANDB_ENTITY, weave.init traces to the key's
    default entity, which only W&B knows: a placeholder stands for it."""
    entity = entity if entity is not None else os.environ.get("WANDB_ENTITY") or ENTITY_PLACEHOLDER
    return f"{wandb_app_url(wandb_base_url())}/{entity}/{quote(project)}/weave"


def wandb_app_url(api_url: str) -> str:
    """The web app of the W&B whose API is at api_url, as wandb and weave map it: WANDB_APP_URL when set; W&B's
    cloud drops the API host's `api.` (api.wandb.ai -> wandb.ai), a dedicated cloud swaps it for `app.`, and a
    self-hosted W&B serves both on one host."""
    if os.environ.get("WANDB_APP_URL"):
        return os.environ["WANDB_APP_URL"].strip("/")
    if "://api.wandb." in api_url and "://api.wandb.test" not in api_url:
        return api_url.replace("://api.", "://").strip("/")
    if "://api." in api_url:
        return api_url.replace("://api.", "://app.").strip("/")
    return api_url


def where_traces_go(weave_url: str, experiment: str, relay_mode: str = "off", spool_dir: str | None = None,
                    every_node: bool = False) -> str:
    """One line for the console. relay_mode as the launcher runs the workers: "off" (they send to W&B),
    "auto" (through their node's trace relay) or "offline" (kept in the relays' spools for UPLOAD_COMMAND).
    every_node: a relay on every node of a Ray cluster, each spooling to spool_dir/<node> on its own disk."""
    hint = " (set WANDB_ENTITY to print the exact link)" if ENTITY_PLACEHOLDER in weave_url else ""
    where = f"{weave_url}{hint}, calls with attribute experiment_name={experiment}"
    spool, node = (f"{spool_dir}/<node>", "each node") if every_node else (spool_dir, "this node")
    if relay_mode == "offline":
        return (f"Weave traces are kept on {node} in {spool} (TRACE_RELAY=offline); after "
                f"`{UPLOAD_COMMAND} --spool {spool}` they are at {where}")
    if relay_mode == "auto":
        return (f"Weave traces: {where} (sent through {node}'s trace relay, which keeps them in {spool} "
                "until W&B has them)")
    return f"Weave traces: {where}"
