"""What the weave 0.54 client sends to W&B, and the answers it accepts in W&B's place.

Routes: GraphQL at `{WANDB_BASE_URL}/graphql`; the trace server at `{WANDB_BASE_URL}/traces/...` (weave's
default for a non-SaaS base URL, or WF_TRACE_SERVER_URL). Writes made by tracing (calls, op definitions and
their code files, tables, feedback) can be answered locally: their answers are ids the request already
carries, or digests computed with weave's own server-equivalent digest code (weave/trace/serialization/digest.py,
"shared by client and server"). Everything else is a read, which only W&B can answer.

Digests: the real server digests an object AFTER turning its `weave:///entity/project/...` refs into refs to its
internal project id, which nobody outside W&B knows. So a locally computed digest equals W&B's for every value
without refs (op definitions, files, plain rows: all a rollout trace holds) and may differ for values with refs
(a Dataset pointing at its table, an Evaluation pointing at its scorers). The forwarder learns W&B's digest
from W&B's answer and rewrites later records that use the local one (upstream.DigestMap).
"""

from __future__ import annotations

import datetime
import email.parser
import email.policy
import json
import re
import threading
import uuid
from dataclasses import dataclass, field
from typing import Any

from recipes.trace_relay.names import RELAY_HEALTH_PATH  # noqa: F401  the relay's own route, served beside W&B's

# Held while a request thread imports weave: weave is imported at its first use, not at the relay's start (~1 s of
# it; a relay no client talks to never needs it), and concurrent first imports could see a half-initialised module.
WEAVE_IMPORT = threading.Lock()

TRACE_PREFIX = "/traces"
GRAPHQL_PATH = "/graphql"
SERVER_INFO_ROUTE = "/server_info"

WRITE_ROUTES = frozenset({
    "/obj/create", "/file/create", "/table/create", "/call/start", "/call/end", "/call/upsert_batch",
    "/call/update", "/feedback/create", "/feedback/batch/create",
})
V2_CALL_WRITE = re.compile(r"/v2/(?P<entity>[^/]+)/(?P<project>[^/]+)/(?P<what>calls/complete|call/start|call/end)")
CALLS_COMPLETE = re.compile(r"/v2/[^/]+/[^/]+/calls/complete")


def strict_loads(body: bytes | str):
    """JSON as json.loads reads it, but ValueError for an object with a key twice (`"\\u0071uery"` is `"query"`):
    json.loads keeps the last, another reader may keep the first, and what the relay checks must be what W&B reads."""
    return json.loads(body, object_pairs_hook=_unique_keys)


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict:
    value = dict(pairs)
    if len(value) != len(pairs):
        seen: set[str] = set()
        twice = next(key for key, _ in pairs if key in seen or seen.add(key))
        raise ValueError(f"the key {twice[:100]!r} appears twice in one object")
    return value


def trace_route(path: str) -> str:
    """The trace-server route of a request path: no query string, no `/traces` mount prefix."""
    path = path.split("?", 1)[0]
    return path[len(TRACE_PREFIX):] if path.startswith(TRACE_PREFIX + "/") else path


def is_write(method: str, route: str) -> bool:
    return method == "POST" and (route in WRITE_ROUTES or V2_CALL_WRITE.fullmatch(route) is not None)


@dataclass
class LocalAnswer:
    """The answer to a write, the body to keep (ids filled in where the server would assign them), and what
    the forwarder needs to know about it."""

    answer: Any
    body: bytes
    project_id: str | None = None
    digest: str | None = None  # object / file / table digest as computed here
    row_digests: list[str] = field(default_factory=list)
    request: Any = None  # the JSON body as parsed (ids filled in), so the relay reads it once


def weave_digest():
    """weave's digest code (weave/trace/serialization/digest.py), imported at its first use."""
    with WEAVE_IMPORT:
        from weave.trace.serialization import digest
    return digest


def answer_write(route: str, content_type: str, body: bytes, ref_converter=None) -> LocalAnswer:
    """Answer a trace write the way W&B would. `ref_converter(value, project_id)`, if given, maps external refs
    to the server's internal form before digesting (what the real server does; the test stand-in uses it)."""
    if route == "/file/create":
        fields = multipart_fields(content_type, body)
        digest = weave_digest().compute_file_digest(fields.get("file", b""))
        return LocalAnswer({"digest": digest}, body, _text(fields.get("project_id")), digest)

    req = strict_loads(body) if body else {}
    answer = _answer_json(route, req, body, ref_converter)
    answer.request = req
    return answer


def _answer_json(route: str, req: Any, body: bytes, ref_converter) -> LocalAnswer:
    v2 = V2_CALL_WRITE.fullmatch(route)
    if v2:
        project_id = f"{v2['entity']}/{v2['project']}"
        if v2["what"] == "call/start":
            start = _with_id(req["start"])
            return LocalAnswer({"id": start["id"], "trace_id": start["trace_id"]}, _dump(req), project_id)
        return LocalAnswer({}, body, project_id)
    if route == "/obj/create":
        obj = req["obj"]
        val = ref_converter(obj["val"], obj["project_id"]) if ref_converter else obj["val"]
        digest = weave_digest().compute_object_digest(val, obj.get("builtin_object_class"))
        return LocalAnswer({"digest": digest, "object_id": obj.get("object_id")}, body, obj["project_id"], digest)
    if route == "/table/create":
        table = req["table"]
        rows = ref_converter(table["rows"], table["project_id"]) if ref_converter else table["rows"]
        digests = weave_digest()
        row_digests = [digests.compute_row_digest(row) for row in rows]
        digest = digests.compute_table_digest(row_digests)
        return LocalAnswer({"digest": digest, "row_digests": row_digests}, body, table["project_id"], digest,
                           row_digests)
    if route == "/call/start":
        start = _with_id(req["start"])
        return LocalAnswer({"id": start["id"], "trace_id": start["trace_id"]}, _dump(req), start.get("project_id"))
    if route == "/call/end":
        return LocalAnswer({}, body, req["end"].get("project_id"))
    if route == "/call/upsert_batch":
        results = []
        for item in req["batch"]:
            if item.get("mode") == "start":
                start = _with_id(item["req"]["start"])
                results.append({"id": start["id"], "trace_id": start["trace_id"]})
            else:
                results.append({})
        first = req["batch"][0]["req"] if req["batch"] else {}
        project = (first.get("start") or first.get("end") or {}).get("project_id")
        return LocalAnswer({"res": results}, _dump(req), project)
    if route == "/call/update":
        return LocalAnswer({}, body, req.get("project_id"))
    if route == "/feedback/create":
        return LocalAnswer(_feedback_answer(req), _dump(req), req.get("project_id"))
    if route == "/feedback/batch/create":
        answers = [_feedback_answer(item) for item in req["batch"]]
        project = req["batch"][0].get("project_id") if req["batch"] else None
        return LocalAnswer({"res": answers}, _dump(req), project)
    raise ValueError(f"not a trace write: {route}")


def complete_calls(route: str, body: bytes) -> list[tuple[dict, dict]]:
    """(start, end) pairs of the calls a write carries in full or in part ({} for a missing half)."""
    if not (route.endswith(("/call/start", "/call/end", "/calls/complete")) or route == "/call/upsert_batch"):
        return []
    req = json.loads(body)
    if CALLS_COMPLETE.fullmatch(route):
        pairs = []
        for item in req["batch"]:
            start = {k: v for k, v in item.items() if k not in ("ended_at", "output", "summary", "exception")}
            end = {k: item.get(k) for k in ("id", "project_id", "ended_at", "output", "summary", "exception")}
            pairs.append((start, end))
        return pairs
    if route.endswith("/call/start"):
        return [(req["start"], {})]
    if route.endswith("/call/end"):
        return [({}, req["end"])]
    if route == "/call/upsert_batch":
        return [((item["req"]["start"], {}) if item.get("mode") == "start" else ({}, item["req"]["end"]))
                for item in req["batch"]]
    return []


def local_server_info() -> dict:
    return {"min_required_weave_python_version": "0.0.0", "trace_server_version": "0.0.0"}


def answer_graphql(body: bytes, entity: str | None, username: str | None) -> dict | None:
    """Answers to the GraphQL weave.init sends (project, viewer, UpsertModel); None for anything else."""
    query = json.loads(body) if body else {}
    text, variables = query.get("query") or "", query.get("variables") or {}
    if re.search(r"\bviewer\b", text):
        return {"data": {"viewer": {"username": username,
                                    "defaultEntity": {"name": entity} if entity else None}}}
    if "upsertModel" in text:
        return {"data": {"upsertModel": {"model": {"name": variables.get("name"),
                                                   "description": variables.get("description")}}}}
    if re.search(r"\bproject\s*\(", text):
        return {"data": {"project": {"name": variables.get("name")}}}
    return None


def multipart_fields(content_type: str, body: bytes) -> dict[str, bytes]:
    message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
        b"Content-Type: " + content_type.encode() + b"\r\n\r\n" + body)
    pairs = [(part.get_param("name", header="content-disposition"), part.get_payload(decode=True) or b"")
             for part in message.iter_parts()]
    fields = dict(pairs)
    if len(fields) != len(pairs):
        raise ValueError("a form field appears twice")
    return fields


def _with_id(start: dict) -> dict:
    """Fill in the ids the server would assign, so the kept request replays with the ids the client saw."""
    start.setdefault("id", None)
    start["id"] = start["id"] or str(uuid.uuid4())
    start["trace_id"] = start.get("trace_id") or str(uuid.uuid4())
    return start


def _feedback_answer(item: dict) -> dict:
    item["id"] = item.get("id") or str(uuid.uuid4())
    return {"id": item["id"], "created_at": datetime.datetime.now(datetime.UTC).isoformat(),
            "wb_user_id": item.get("wb_user_id") or "", "payload": item.get("payload") or {}}


def encode(value: Any) -> bytes:
    """JSON as weave itself sends it (compact, UTF-8): what the relay re-encodes must not weigh more at W&B than what
    the client posted (json.dumps' defaults add a space after every separator and escape every non-ASCII character,
    ~6% more on a rollout trace)."""
    try:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()
    except UnicodeEncodeError:  # a lone surrogate is not UTF-8: escaped, as json.dumps does by default
        return json.dumps(value, separators=(",", ":")).encode()


_dump = encode


def _text(value: bytes | None) -> str | None:
    return value.decode() if value is not None else None
