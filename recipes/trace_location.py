"""Where a run's Weave traces can be opened: said once by the launcher, instead of a link per traced call from
every agent-loop worker (recipes.tracing.quiet_call_links)."""

from __future__ import annotations

import os

ENTITY_PLACEHOLDER = "<your W&B entity>"


def weave_project_url(project: str, entity: str | None = None) -> str:
    """The project's Weave page, as weave itself links it: the W&B app of WANDB_BASE_URL (api.wandb.ai ->
    wandb.ai; a self-hosted W&B keeps its host). Without WANDB_ENTITY, weave.init traces to the key's default
    entity, which only W&B knows: a placeholder stands for it."""
    entity = entity if entity is not None else os.environ.get("WANDB_ENTITY") or ENTITY_PLACEHOLDER
    try:
        from weave.trace.urls import project_weave_root_url
    except ImportError:  # weave is checked elsewhere; the link is still worth printing
        return f"https://wandb.ai/{entity}/{project}/weave"
    return project_weave_root_url(entity, project)


def where_traces_go(weave_url: str, experiment: str, relay_mode: str = "off", spool_dir: str | None = None) -> str:
    """One line for the console. relay_mode as the launcher runs the workers: "off" (they send to W&B),
    "auto" (through this node's trace relay) or "offline" (kept in the relay's spool for upload_traces.py)."""
    hint = " (set WANDB_ENTITY to print the exact link)" if ENTITY_PLACEHOLDER in weave_url else ""
    where = f"{weave_url}{hint}, calls with attribute experiment_name={experiment}"
    if relay_mode == "offline":
        return (f"Weave traces are kept on this node in {spool_dir} (TRACE_RELAY=offline); after "
                f"`python scripts/upload_traces.py --spool {spool_dir}` they are at {where}")
    if relay_mode == "auto":
        return (f"Weave traces: {where} (sent through this node's trace relay, which keeps them in {spool_dir} "
                "until W&B has them)")
    return f"Weave traces: {where}"
