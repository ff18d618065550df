"""What a W&B holds of a run's traces, read the way the Weave UI and `client.get_calls` read it: weave's public call
query (POST <trace server>/calls/stream_query, JSON lines, paged by weave itself). Works against W&B, the project's
stand-in, or any other server of weave 0.54's reads; W&B keeps one row per call id, so how often a call arrived is
only known where the endpoint also serves the stand-in's own `/standin/received` (`repeats`)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

from recipes.credentials import wandb_api_key

COLUMNS = ["id", "trace_id", "parent_id", "thread_id", "turn_id", "op_name", "started_at", "ended_at", "exception",
           "attributes", "output"]
RECEIVED_PATH = "/standin/received"  # the stand-in's own route (scripts/harness/standins/weave_http_server.py)
_VIEWER = "query Viewer { viewer { username defaultEntity { name } } }"


def weave_reader(base_url: str, trace_url: str | None, entity: str, project: str, api_key: str | None = None):
    """A weave client on the endpoint's trace server, without weave.init (no GraphQL, no version check, no global
    client): its get_calls is the public query."""
    from weave.trace.weave_client import WeaveClient
    from weave.trace_server_bindings.remote_http_trace_server import RemoteHTTPTraceServer

    server = RemoteHTTPTraceServer((trace_url or base_url.rstrip("/") + "/traces").rstrip("/"))
    server.set_auth(("api", api_key or wandb_api_key(base_url=base_url) or ""))
    return WeaveClient(entity, project, server, ensure_project_exists=False)


def default_entity(base_url: str, api_key: str | None = None) -> str:
    """The key's default entity, as weave.init asks W&B for it (GraphQL viewer)."""
    request = urllib.request.Request(base_url.rstrip("/") + "/graphql", json.dumps({"query": _VIEWER}).encode(),
                                     {"content-type": "application/json"})
    key = api_key or wandb_api_key(base_url=base_url) or ""
    import base64

    request.add_header("authorization", "Basic " + base64.b64encode(f"api:{key}".encode()).decode())
    with urllib.request.urlopen(request, timeout=60) as answer:
        entity = ((json.load(answer).get("data") or {}).get("viewer") or {}).get("defaultEntity") or {}
    if not entity.get("name"):
        raise ValueError(f"W&B at {base_url} names no default entity for this key: set WANDB_ENTITY (or --entity)")
    return entity["name"]


def held_calls(client, experiment: str | None) -> list[dict]:
    """Every call of the experiment the endpoint holds (verl puts `experiment_name` on every traced call; the recipe
    copies it to the chat call), in a stable order: started_at, then id."""
    query = None if not experiment else {
        "$expr": {"$eq": [{"$getField": "attributes.experiment_name"}, {"$literal": experiment}]}}
    calls = client.get_calls(query=query, columns=COLUMNS,
                             sort_by=[{"field": "started_at", "direction": "asc"}, {"field": "id", "direction": "asc"}])
    return [{"id": c.id, "trace_id": c.trace_id, "parent_id": c.parent_id, "thread_id": c.thread_id,
             "op_name": str(c.op_name), "ended": c.ended_at is not None, "attributes": _plain(c.attributes),
             "output": _plain(c.output) if c.parent_id is None else None} for c in calls]


def _plain(value):
    """weave's WeaveDict / WeaveList values as plain JSON ones."""
    return json.loads(json.dumps(value, default=str)) if value is not None else None


def repeats(base_url: str) -> dict[str, int] | None:
    """Starts received per call id, where the endpoint is the project's stand-in; None from any other W&B."""
    try:
        with urllib.request.urlopen(base_url.rstrip("/") + RECEIVED_PATH, timeout=60) as answer:
            return json.load(answer)["starts_received"]
    except urllib.error.HTTPError as err:
        if err.code in (401, 403, 404, 405, 501):
            return None
        raise
    except (ValueError, KeyError):  # answered, but not the stand-in's shape
        return None
