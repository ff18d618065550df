"""Stand-in for W&B's Weave trace server: keeps calls and objects in memory, so the real weave client
(`weave.trace.weave_client.WeaveClient`) can be exercised offline. weave 0.54 ships no local server.

    server, client = install_memory_weave_client("my-project")   # later weave.init("my-project") returns it
    ... run traced code ...
    client.flush(); server.calls  # {call_id: {"start": ..., "end": ...}}
"""

from __future__ import annotations

import hashlib
import json
import threading
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

from weave.trace_server_bindings.models import EnsureProjectExistsRes
from weave.vendor.weave_server_sdk import types as t
from weave.vendor.weave_server_sdk.types.call_read_response import Call as CallRow


def _digest(payload: Any) -> str:
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:32]


class MemoryTraceServer:
    """The subset of the trace-server interface the weave client uses to record calls, and to log and look
    up evaluations (feedback, call queries). weave 0.54: requests are plain dicts, responses the SDK's
    models. Optional features (`get_*_processor`) are absent on purpose: the client probes them with
    hasattr and then calls the server directly."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.starts: dict[str, dict] = {}
        self.ends: dict[str, dict] = {}
        self.objects: dict[str, Any] = {}
        self.tables: dict[str, list] = {}
        self.files: dict[str, bytes] = {}
        # filled by the HTTP stand-in (harness.standins.weave_http_server), which digests like the real server
        self.object_versions: dict[tuple[str, str, str], Any] = {}  # (project_id, object_id, digest) -> val
        self.feedback: list[dict] = []

    # --- what the client calls ---------------------------------------------------------------------
    def ensure_project_exists(self, entity: str, project: str) -> EnsureProjectExistsRes:
        return EnsureProjectExistsRes(project_name=project)

    def server_info(self) -> t.ServerInfoRes:
        return t.ServerInfoRes(min_required_weave_python_version="0.0.0", trace_server_version="memory")

    def call_start(self, req: dict) -> t.CallStartResponse:
        start = dict(req["start"])
        with self._lock:
            self.starts[start["id"]] = start
        return t.CallStartResponse(id=start["id"], trace_id=start["trace_id"])

    def call_end(self, req: dict) -> dict:
        end = dict(req["end"])
        with self._lock:
            self.ends[end["id"]] = end
        return {}

    def call_start_batch(self, req: dict) -> t.CallUpsertBatchResponse:
        results = []
        for item in req["batch"]:
            if item.get("mode") == "start":
                results.append(self.call_start(item["req"]))
            else:
                results.append(self.call_end(item["req"]))
        return t.CallUpsertBatchResponse(res=results)

    def obj_create(self, req: dict) -> t.ObjectCreateResponse:
        obj = req["obj"]
        digest = _digest(obj.get("val"))
        with self._lock:
            self.objects[digest] = obj.get("val")
        return t.ObjectCreateResponse(digest=digest, object_id=obj.get("object_id"))

    def table_create(self, req: dict) -> t.TableCreateResponse:
        rows = list(req["table"]["rows"])
        digest = _digest(rows)
        with self._lock:
            self.tables[digest] = rows
        return t.TableCreateResponse(digest=digest, row_digests=[_digest(r) for r in rows])

    def table_create_from_digests(self, req: dict) -> t.TableCreateFromDigestsResponse:
        """A table from rows sent before in table_create chunks: how weave uploads tables of over 1000 rows."""
        by_digest = self.table_rows_by_digest()
        rows = [by_digest[row_digest] for row_digest in req["row_digests"]]
        digest = _digest(rows)
        with self._lock:
            self.tables[digest] = rows
        return t.TableCreateFromDigestsResponse(digest=digest)

    def file_create(self, req: dict) -> t.FileCreateResponse:
        content = req["file"]
        content = content[1] if isinstance(content, tuple) else content
        content = content if isinstance(content, bytes) else getattr(content, "read", lambda: b"")()
        digest = hashlib.sha256(content).hexdigest()[:32]
        with self._lock:
            self.files[digest] = content
        return t.FileCreateResponse(digest=digest)

    # --- feedback and call queries (weave.EvaluationLogger's scores, "already published?" lookups) ----
    def feedback_create(self, req: dict) -> t.FeedbackCreateResponse:
        row = {**req, "id": str(uuid.uuid4()), "created_at": datetime.now(UTC)}
        with self._lock:
            self.feedback.append(row)
        return t.FeedbackCreateResponse(id=row["id"], created_at=row["created_at"], payload=req.get("payload") or {},
                                        wb_user_id="offline")

    def calls_query_stream(self, req: dict) -> Iterator[CallRow]:
        """Calls of the project that match `filter` (op_names with `:*` version wildcards, call_ids,
        parent_ids, trace_ids, thread_ids, turn_ids, trace_roots_only) and `query` (the `$expr` subset in
        `_evaluate`), in start order or by `sort_by` (top-level fields), with offset/limit. Anything else in a
        request raises: a stand-in must not answer a question it does not understand as if it had."""
        unknown = {key for key, value in (req.get("filter") or {}).items() if value is not None} - _FILTER_KEYS
        sort_by = req.get("sort_by") or []
        unsortable = [spec["field"] for spec in sort_by if spec["field"] not in _SORT_FIELDS]
        if unknown or unsortable:
            raise NotImplementedError(
                f"MemoryTraceServer.calls_query_stream: unsupported {sorted(unknown) or f'sort_by {unsortable}'}")
        rows = [row for row in self._call_rows(req["project_id"])
                if _matches(row, req.get("filter") or {}, req.get("query"))]
        for spec in reversed(sort_by):  # the first key sorts last: it wins
            rows.sort(key=lambda row: str(getattr(row, spec["field"]) or ""), reverse=spec.get("direction") == "desc")
        offset = req.get("offset") or 0
        limit = req.get("limit")
        yield from rows[offset: None if limit is None else offset + limit]

    def threads_query_stream(self, req: dict) -> list[dict]:
        """The project's threads as the Weave UI's thread list reads them: per thread id, its turn calls (a call
        whose turn_id is its own id) counted, the first start and the last end; `filter.thread_ids` only."""
        flt = req.get("filter") or {}
        unknown = {key for key, value in flt.items() if value is not None} - {"thread_ids"}
        if unknown or req.get("sort_by"):
            raise NotImplementedError(
                f"MemoryTraceServer.threads_query_stream: unsupported {sorted(unknown) or 'sort_by'}")
        threads: dict[str, dict] = {}
        for row in self._call_rows(req["project_id"]):
            if not row.thread_id or row.turn_id != row.id:
                continue
            thread = threads.setdefault(row.thread_id, {"thread_id": row.thread_id, "turn_count": 0,
                                                        "start_time": row.started_at, "first_turn_id": row.id,
                                                        "last_updated": row.ended_at or row.started_at})
            thread["turn_count"] += 1
            thread["last_updated"] = max(thread["last_updated"], row.ended_at or row.started_at)
        wanted = flt.get("thread_ids")
        return [t for t in threads.values() if wanted is None or t["thread_id"] in wanted]

    def calls_query_stats(self, req: dict) -> t.CallQueryStatsResponse:
        return t.CallQueryStatsResponse(count=sum(1 for _ in self.calls_query_stream(
            {"project_id": req["project_id"], "filter": req.get("filter"), "query": req.get("query")})))

    def _call_rows(self, project_id: str) -> list[CallRow]:
        with self._lock:
            starts = sorted((s for s in self.starts.values() if s.get("project_id") == project_id),
                            key=lambda s: s["started_at"])
            ends = dict(self.ends)
        rows = []
        for start in starts:
            end = ends.get(start["id"], {})
            rows.append(CallRow(
                id=start["id"], project_id=project_id, op_name=str(start["op_name"]), trace_id=start["trace_id"],
                parent_id=start.get("parent_id"), display_name=start.get("display_name"),
                started_at=start["started_at"], attributes=start.get("attributes") or {},
                inputs=start.get("inputs") or {}, ended_at=end.get("ended_at"), exception=end.get("exception"),
                output=end.get("output"), summary=end.get("summary"), thread_id=start.get("thread_id"),
                turn_id=start.get("turn_id"), wb_run_id=start.get("wb_run_id")))
        return rows

    # --- what the HTTP stand-in records (digests computed by the caller, as the real server computes them) ---
    def record_object(self, project_id: str, object_id: str, digest: str, val: Any) -> None:
        with self._lock:
            self.objects[digest] = val
            self.object_versions[(project_id, object_id, digest)] = val

    def record_table(self, digest: str, rows: list) -> None:
        with self._lock:
            self.tables[digest] = list(rows)

    def record_file(self, digest: str, content: bytes) -> None:
        with self._lock:
            self.files[digest] = content

    # --- reads the HTTP stand-in answers (besides the call queries above) ----------------------------
    def obj_read(self, req: dict) -> dict:
        key = (req["project_id"], req["object_id"], req["digest"])
        with self._lock:
            if key not in self.object_versions:
                raise KeyError(f"no object {key}")
            val = self.object_versions[key]
        is_op = isinstance(val, dict) and (val.get("weave_type") or {}).get("type") == "Op"
        return {"obj": {"project_id": key[0], "object_id": key[1], "digest": key[2], "val": val,
                        "created_at": "2024-01-01T00:00:00Z", "kind": "op" if is_op else "object",
                        "is_latest": 1, "version_index": 0}}

    def table_query(self, req: dict) -> dict:
        with self._lock:
            rows = self.tables.get(req["digest"], [])
        from weave.trace.serialization.digest import compute_row_digest

        return {"rows": [{"digest": compute_row_digest(r), "val": r, "original_index": i} for i, r in enumerate(rows)]}

    def refs_read_batch(self, req: dict) -> dict:
        """Values of object/op refs (`weave:///entity/project/{object|op}/name:digest`); None for others."""
        vals = []
        for ref in req.get("refs") or []:
            parts = ref.removeprefix("weave:///").split("/")
            if len(parts) >= 4 and parts[2] in ("object", "op") and ":" in parts[3]:
                name, digest = parts[3].split(":", 1)
                with self._lock:
                    vals.append(self.object_versions.get((f"{parts[0]}/{parts[1]}", name, digest)))
            else:
                vals.append(None)
        return {"vals": vals}

    # --- what tests read ----------------------------------------------------------------------------
    def complete_call_ids(self) -> set[str]:
        """Ids of calls received in full: start and end."""
        with self._lock:
            return set(self.starts) & set(self.ends)

    def recorded_calls(self) -> list[dict]:
        """Every call as a plain dict (id, parent_id, trace_id, thread_id, turn_id, op_name, display_name,
        attributes, inputs, output, summary, exception, ended), in start order."""
        with self._lock:
            starts = sorted(self.starts.values(), key=lambda s: str(s.get("started_at")))
            ends = dict(self.ends)
        calls = []
        for start in starts:
            end = ends.get(start["id"], {})
            calls.append({
                "id": start["id"], "parent_id": start.get("parent_id"), "trace_id": start.get("trace_id"),
                "thread_id": start.get("thread_id"), "turn_id": start.get("turn_id"),
                "op_name": start.get("op_name"), "display_name": start.get("display_name"),
                "attributes": start.get("attributes") or {}, "inputs": start.get("inputs") or {},
                "output": end.get("output"), "summary": end.get("summary"), "exception": end.get("exception"),
                "ended": bool(end),
            })
        return calls

    def table_rows_by_digest(self) -> dict[str, Any]:
        """Every stored table row by its row digest: what a dataset row ref (`.../attr/rows/id/<digest>`) names."""
        with self._lock:
            return {_digest(row): row for rows in self.tables.values() for row in rows}


_FILTER_KEYS = frozenset({"op_names", "call_ids", "parent_ids", "trace_ids", "thread_ids", "turn_ids",
                          "trace_roots_only"})
_SORT_FIELDS = frozenset({"started_at", "ended_at", "id", "display_name"})


def _matches(row: CallRow, flt: dict, query: dict | None) -> bool:
    if flt.get("op_names") and not any(_op_name_matches(row.op_name, name) for name in flt["op_names"]):
        return False
    for key, field in (("call_ids", "id"), ("parent_ids", "parent_id"), ("trace_ids", "trace_id"),
                       ("thread_ids", "thread_id"), ("turn_ids", "turn_id")):
        if flt.get(key) is not None and getattr(row, field) not in flt[key]:
            return False
    if flt.get("trace_roots_only") and row.parent_id is not None:
        return False
    return query is None or bool(_evaluate(query["$expr"], row))


def _op_name_matches(op_name: str, wanted: str) -> bool:
    """`weave:///e/p/op/Name:*` matches every version of the op; anything else must be equal."""
    return op_name.startswith(wanted[:-1]) if wanted.endswith(":*") else op_name == wanted


def _evaluate(expr: Any, row: CallRow) -> Any:
    """The part of the trace server's query language the recipe uses: $and $or $not $eq $getField $literal."""
    (op, arg), = expr.items()
    if op == "$literal":
        return arg
    if op == "$getField":
        value: Any = row.model_dump()
        for part in arg.split("."):
            value = value.get(part) if isinstance(value, dict) else None
        return value
    if op == "$and":
        return all(_evaluate(e, row) for e in arg)
    if op == "$or":
        return any(_evaluate(e, row) for e in arg)
    if op == "$not":
        return not _evaluate(arg[0], row)
    if op == "$eq":
        left, right = (_evaluate(e, row) for e in arg)
        return left == right
    raise NotImplementedError(f"MemoryTraceServer: query operator {op} is not implemented")


def install_memory_weave_client(project: str, entity: str = "offline"):
    """A real WeaveClient on a MemoryTraceServer, installed as weave's global client: a later
    `weave.init(project)` (as verl's RolloutTraceConfig.init does) returns it without any network."""
    from weave.trace.context import weave_client_context
    from weave.trace.weave_client import WeaveClient

    server = MemoryTraceServer()
    client = WeaveClient(entity, project, server, ensure_project_exists=True)
    weave_client_context.set_weave_client_global(None)  # weave ignores a new global while another is set
    weave_client_context.set_weave_client_global(client)
    return server, client
