"""Stand-in for W&B (its GraphQL API and its Weave trace server) on 127.0.0.1, spoken to over real HTTP.

Unlike harness.standins.weave_memory_server (which hands the weave client an in-process server object), this
puts the whole client in play: its HTTP transport, batching, retries, flush, exit behaviour and response cache.
It answers what the real weave 0.54 client sends (/server_info, the GraphQL project, viewer and UpsertModel
requests of weave.init, the trace writes, and the reads /calls/stream_query, /calls/query_stats,
/threads/stream_query, /obj/read, /table/query, /refs/read_batch), records everything in a MemoryTraceServer with
the bytes of every write's body (what W&B counts as trace data received), never answers 4xx to a write (weave drops
those without retry; a read it cannot answer gets 400, which weave does not retry either), and can be stopped and
started again on the same port to play an outage.

Objects are digested as the real server digests them: after turning `weave:///entity/project/...` refs into
refs to an internal project id, so a value holding refs gets a different digest than a client-side guess.

    with loopback_wandb(project="p") as wandb:      # wandb.env: the variables a process needs to trace here
        ... run processes with wandb.env ...
        wandb.stop(); ...; wandb.start()           # an outage
        assert len(wandb.storage.complete_call_ids()) == made

    python -m harness.standins.weave_http_server [--port 0] [--url-file FILE]   # in its own process, until
    SIGTERM

`GET /standin/received` (the stand-in's own route, no W&B has it) answers what it received: every call (id,
parent, trace, thread, op, attributes, ended), how many times each call's start arrived and the write bytes by
route, for a benchmark to count from outside (scripts/trace_tally.py, which asks it only for the repeats, which no
W&B can report).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

from weave.trace.trace_server_converter import universal_ext_to_int_ref_converter

from harness.standins.weave_memory_server import MemoryTraceServer
from recipes.signals import wait_for_event
from recipes.trace_relay import protocol
from recipes.trace_relay.http import LoopbackHTTPServer, Request, Response
from recipes.trace_relay.limits import Limits

API_KEY = "loopback-" + "0" * 31  # any string: the stand-in checks nothing
# W&B takes weave's batches of up to 31 MiB (weave/trace_server_bindings/http_utils.py), and the relay's merged ones
WANDB_LIMITS = Limits(max_body_bytes=64 * 1024 * 1024, client_timeout_s=120.0, max_connections=1024)
USERNAME = "loopback-user"
RECEIVED_PATH = "/standin/received"
_READS = {  # route -> MemoryTraceServer method
    "/calls/stream_query": "calls_query_stream", "/calls/query_stats": "calls_query_stats", "/obj/read": "obj_read",
    "/table/query": "table_query", "/refs/read_batch": "refs_read_batch",
    "/threads/stream_query": "threads_query_stream",
}
_STREAMS = ("/calls/stream_query", "/threads/stream_query")  # answered as JSON lines


class WandbStandIn:
    """The app behind the HTTP server: W&B as weave's client sees it."""

    def __init__(self, entity: str, storage: MemoryTraceServer | None = None,
                 min_required_weave_version: str = "0.0.0") -> None:
        self.entity = entity
        self.storage = storage or MemoryTraceServer()
        self.min_required_weave_version = min_required_weave_version
        self.write_delay_s = 0.0  # > 0: a slow W&B
        self.refuse_writes_with: int | None = None  # e.g. 400 or 401: W&B refusing (the default never refuses)
        self.digest_mismatches: list[tuple[str, str, str]] = []  # (route, expected by client, computed here)
        self.requests: list[tuple[str, str]] = []  # (method, route), in arrival order
        self.call_starts_received: Counter[str] = Counter()  # call id -> starts received (storage keeps one)
        self.write_bytes: Counter[str] = Counter()  # route -> body bytes of the trace writes received
        self.serves_received = True  # False: only W&B's own routes, as any other W&B (no RECEIVED_PATH)
        self._lock = threading.Lock()

    def handle(self, request: Request) -> Response:
        route = protocol.trace_route(request.path)
        with self._lock:
            self.requests.append((request.method, route))
        if request.path == RECEIVED_PATH and self.serves_received:
            return Response.json(self.received())
        if request.path.split("?")[0] == protocol.GRAPHQL_PATH:
            answer = protocol.answer_graphql(request.body, self.entity, USERNAME)
            return Response.json(answer or {"data": None, "errors": [{"message": "not supported by the stand-in"}]})
        if route == protocol.SERVER_INFO_ROUTE:
            return Response.json({"min_required_weave_python_version": self.min_required_weave_version,
                                  "trace_server_version": "loopback"})
        if protocol.is_write(request.method, route):
            if self.write_delay_s:
                time.sleep(self.write_delay_s)
            if self.refuse_writes_with:
                return Response.json({"reason": "refused by the test"}, self.refuse_writes_with)
            return Response.json(self._record(route, request))
        if route in _READS:
            return self._read(route, json.loads(request.body or b"{}"))
        if request.method == "GET":  # a read of a route W&B does not have either
            return Response.json({"reason": f"no route GET {route}"}, 404)
        # never 4xx: the client would drop what it sent; a 501 names what is missing here
        return Response.json({"reason": f"the W&B stand-in does not implement {request.method} {route}"}, 501)

    def _record(self, route: str, request: Request) -> dict:
        with self._lock:
            self.write_bytes["calls/complete" if protocol.CALLS_COMPLETE.fullmatch(route) else route] += \
                len(request.body or b"")
        ctype = request.headers.get("content-type", "")
        local = protocol.answer_write(route, ctype, request.body, ref_converter=self._to_internal)
        expected = self._expected_digest(route, ctype, request.body)
        if expected and expected != local.digest:  # the real server answers 409
            self.digest_mismatches.append((route, expected, local.digest))
        store = self.storage
        if route == "/obj/create":
            obj = json.loads(local.body)["obj"]
            store.record_object(obj["project_id"], obj["object_id"], local.digest, obj["val"])
        elif route == "/file/create":
            store.record_file(local.digest, protocol.multipart_fields(ctype, request.body).get("file", b""))
        elif route == "/table/create":
            store.record_table(local.digest, json.loads(local.body)["table"]["rows"])
        elif route.startswith("/feedback/"):
            req = json.loads(local.body)
            for item in req.get("batch") or [req]:
                store.feedback_create(item)
        for start, end in protocol.complete_calls(route, local.body):
            if start:
                with self._lock:
                    self.call_starts_received[start["id"]] += 1
                store.call_start({"start": start})
            if end:
                store.call_end({"end": end})
        return local.answer

    def _read(self, route: str, req: dict) -> Response:
        try:
            result = getattr(self.storage, _READS[route])(req)
        except (NotImplementedError, KeyError) as err:  # 400: weave retries a 5xx for seconds, a 4xx not at all
            return Response.json({"reason": str(err)}, 400 if isinstance(err, NotImplementedError) else 404)
        if route in _STREAMS:
            body = b"".join((row.model_dump_json().encode() if hasattr(row, "model_dump_json")
                             else json.dumps(row, default=str).encode()) + b"\n" for row in result)
            return Response(body=body, content_type="application/jsonl")
        if route == "/calls/query_stats":
            return Response(body=result.model_dump_json().encode(), content_type="application/json")
        return Response.json(result)

    @staticmethod
    def _expected_digest(route: str, ctype: str, body: bytes) -> str | None:
        """The digest the client computed itself, if it sent one (files always; objects with client digests)."""
        if route == "/file/create":
            value = protocol.multipart_fields(ctype, body).get("expected_digest")
            return value.decode() if value else None
        if route == "/obj/create":
            return json.loads(body)["obj"].get("expected_digest")
        return None

    @staticmethod
    def _to_internal(value, project_id: str):
        return universal_ext_to_int_ref_converter(
            value, lambda ext: "internal-" + hashlib.sha256(ext.encode()).hexdigest()[:16])

    def received(self) -> dict:
        """Every call received (id, parent_id, trace_id, thread_id, op_name, attributes, ended), the starts
        received per call id and the write bytes received by route."""
        calls = [{key: call[key] for key in ("id", "parent_id", "trace_id", "thread_id", "op_name", "attributes",
                                             "ended")}
                 for call in self.storage.recorded_calls()]
        with self._lock:
            return {"calls": calls, "starts_received": dict(self.call_starts_received),
                    "write_bytes": dict(self.write_bytes)}

    def request_count(self, route: str) -> int:
        with self._lock:
            return sum(1 for _, r in self.requests if r == route)


class LoopbackWandb:
    """A running stand-in: its URL, the env a process needs to use it, and stop/start for outages."""

    def __init__(self, entity: str, port: int = 0, config_dir: str | None = None, host: str = "127.0.0.1",
                 **app_kwargs) -> None:
        self.app = WandbStandIn(entity, **app_kwargs)
        self.http = LoopbackHTTPServer(self.app, host=host, port=port, limits=WANDB_LIMITS)
        self.entity = entity
        self.config_dir = config_dir

    @property
    def storage(self) -> MemoryTraceServer:
        return self.app.storage

    @property
    def url(self) -> str:
        return self.http.url

    @property
    def env(self) -> dict[str, str]:
        """For a process that should trace here, as a Ray worker gets it: all strings, nothing inherited."""
        env = {"WANDB_BASE_URL": self.url, "WF_TRACE_SERVER_URL": self.url + protocol.TRACE_PREFIX,
               "WANDB_API_KEY": API_KEY, "WANDB_ENTITY": self.entity, "WANDB_ERROR_REPORTING": "false",
               "WEAVE_USE_SERVER_CACHE": "false", "WEAVE_PRINT_CALL_LINK": "false"}
        if self.config_dir:
            env["WANDB_CONFIG_DIR"] = self.config_dir
        return env

    def start(self) -> LoopbackWandb:
        self.http.start()
        return self

    def stop(self) -> None:
        self.http.stop()

    def wait_for_calls(self, count: int, timeout_s: float = 60.0) -> set[str]:
        """Poll until `count` complete calls arrived or the time is up; the ids received."""
        deadline = time.monotonic() + timeout_s
        while len(ids := self.storage.complete_call_ids()) < count and time.monotonic() < deadline:
            time.sleep(0.1)
        return ids


@contextlib.contextmanager
def loopback_wandb(entity: str = "loopback-entity", host: str = "127.0.0.1", **app_kwargs) -> Iterator[LoopbackWandb]:
    """A running W&B stand-in on 127.0.0.1 (or `host`: an address of this machine that namespaced nodes reach) with a
    throwaway WANDB_CONFIG_DIR; stopped on exit."""
    with tempfile.TemporaryDirectory(prefix="wandb-config-") as config_dir:
        Path(config_dir, "settings").write_text("[default]\n")
        server = LoopbackWandb(entity, config_dir=config_dir, host=host, **app_kwargs).start()
        try:
            yield server
        finally:
            server.stop()


def main(argv: list[str] | None = None) -> int:
    """Serve the stand-in on 127.0.0.1 until SIGTERM or SIGINT; its URL is printed and written to --url-file."""
    import argparse
    import os
    import signal

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--entity", default="loopback-entity")
    p.add_argument("--url-file", type=Path, help="write the URL here once it listens")
    p.add_argument("--plain", action="store_true", help=f"W&B's own routes only (no {RECEIVED_PATH}), as another W&B")
    args = p.parse_args(argv)
    server = LoopbackWandb(args.entity, port=args.port).start()
    server.app.serves_received = not args.plain
    if args.url_file:
        tmp = args.url_file.with_name(args.url_file.name + ".tmp")
        tmp.write_text(server.url + "\n")
        os.replace(tmp, args.url_file)
    print(f"W&B stand-in: {server.url} (entity {args.entity}; WANDB_API_KEY={API_KEY})", flush=True)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    wait_for_event(stop)
    server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
