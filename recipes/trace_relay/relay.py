"""The relay: what weave's clients on this node talk to instead of W&B.

Only the run's clients, for what weave's client makes (recipes/trace_relay/access.py: the run's token, an allow-list
of routes and of weave.init's GraphQL); everything else gets a 4xx, each reason logged once. Trace writes go to the
spool (fsynced) and are answered at once, so a client's flush empties its queue in milliseconds and weave never gets
the chance to drop a batch; a spool that cannot take one (a full disk) answers 503 and weave sends it again. A
background thread forwards the spool to W&B in order, retrying without limit. weave.init's own requests
(/server_info, GraphQL) go to W&B when it answers, else are answered here, so a worker started during an outage (or
on an air-gapped cluster) traces to disk. The few reads weave makes pass through to W&B, and fail while it is
unreachable. What one client may cost (body size, time, connections, disk): recipes/trace_relay/limits.py.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import Counter

import httpx

from recipes.trace_relay import access, protocol
from recipes.trace_relay.http import LoopbackHTTPServer, Request, Response, refusal
from recipes.trace_relay.limits import MIN_FREE_BYTES, Limits
from recipes.trace_relay.repeats import RepeatFilter
from recipes.trace_relay.spool import Record, Spool, SpoolRefused, Summary
from recipes.trace_relay.upstream import Forwarder, Upstream, UpstreamDown, UpstreamRefused

logger = logging.getLogger(__name__)

# headers worth replaying (the server reads them); never the client's Authorization
_KEPT_HEADERS = ("x-weave-client-capabilities", "x-weave-trace-id", "user-agent")
INIT_REQUEST_TIMEOUT_S = 10.0  # weave.init waits on these; past this the relay answers itself
ASSUME_DOWN_FOR_S = 30.0  # after a failure, answer init requests here without trying W&B first
SPOOL_RETRY_AFTER_S = 5  # what a client that found the spool full is told to wait


class TraceRelay:
    """`token`: the run's secret its clients present (access.py); `limits`, `min_free_bytes`: limits.py."""

    def __init__(self, spool_dir, upstream: Upstream | None, *, token: str, entity: str | None = None,
                 host: str = "127.0.0.1", port: int = 0, max_retry_interval_s: float = 30.0, listening=None,
                 lock_wait_s: float = 0.0, limits: Limits | None = None, min_free_bytes: int = MIN_FREE_BYTES) -> None:
        if not token:
            raise ValueError("a trace relay needs the token its clients present")
        self.token = token
        self.spool = Spool(spool_dir, min_free_bytes=min_free_bytes).acquire(lock_wait_s)
        self.max_retry_interval_s = max_retry_interval_s
        self.upstream = upstream
        self.entity = entity
        self.forwarder = Forwarder(self.spool, upstream) if upstream else None
        # a relay taking over from one that was killed knows the calls that one kept: a client that never got
        # their answer sends them again, and they must not be kept twice
        self.repeats = RepeatFilter.seeded(self.spool.iter_newest_segment())
        self._write_lock = threading.Lock()  # a repeat is recognised only once the first copy is durable
        # listening: a socket bound by a supervisor
        # only this user's processes (the run's), checked as each connection is accepted (http.py)
        self.http = LoopbackHTTPServer(self, host, port, listening, limits or Limits(), only_uid=os.geteuid())
        self.refusals: Counter[str] = Counter()  # reason -> requests refused for it
        self._refusals_lock = threading.Lock()
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._down_since: float | None = None  # start of the current outage
        self._failed_at = 0.0  # last failed attempt
        self.last_error: str | None = None

    @property
    def url(self) -> str:
        return self.http.url

    def start(self) -> TraceRelay:
        self.http.start()
        if self.forwarder is not None:
            self._thread = threading.Thread(target=self._forward_forever, name="trace-relay-forward", daemon=True)
            self._thread.start()
        return self

    def stop(self, drain_timeout_s: float = 60.0) -> Summary:
        """Stop taking requests, send what is pending for up to `drain_timeout_s`, release the spool."""
        self.http.stop()
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        error = None
        if self.forwarder is not None and self.spool.pending_count:
            error = self.forwarder.drain(time.monotonic() + drain_timeout_s)
        rejected = self.forwarder.rejected_total if self.forwarder else 0
        if self.refusals:
            logger.warning("trace relay: refused %d request(s) in all: %s", sum(self.refusals.values()),
                           "; ".join(f"{count} x {reason}" for reason, count in self.refusals.most_common()))
        summary = Summary(self.spool.sent_count - rejected, self.spool.pending_count, rejected,
                          error or self.last_error, self.spool.sent_bytes)
        self.spool.close()
        return summary

    # --- HTTP ---------------------------------------------------------------------------------------
    def admit(self, request: Request) -> Response | None:
        """Before a body is read: the run's clients only (the health probe too), for what weave's client makes."""
        kind = access.kind_of(request.method, request.path)
        if not access.token_matches(request.headers.get("authorization"), self.token):
            return self._refuse(401, "no token, or not the run's", request,
                                {"WWW-Authenticate": 'Basic realm="trace relay"'})
        if kind is None:
            return self._refuse(403, "not a request weave's client makes (route or method)", request)
        return None

    def refused(self, status: int, reason: str, request: Request | None) -> None:
        """Logged the first time a reason comes up, counted after (the total at stop): no flood of lines."""
        with self._refusals_lock:
            first = not self.refusals[reason]
            self.refusals[reason] += 1
        if first:
            what = f"{request.method} {request.path[:120]!r}" if request is not None else "a connection"
            logger.warning("trace relay: refused %s: %d %s (further refusals for this reason are counted, not "
                           "logged)", what, status, reason)

    def _refuse(self, status: int, reason: str, request: Request, headers: dict[str, str] | None = None) -> Response:
        self.refused(status, reason, request)
        return refusal(status, reason, headers)

    def handle(self, request: Request) -> Response:
        kind = access.kind_of(request.method, request.path)
        route = protocol.trace_route(request.path)
        if kind == "health":
            return Response.json({"trace_relay": True, "offline": self.upstream is None})
        if kind == "graphql":
            checked = access.weave_graphql(request.body)
            if checked is None:
                return self._refuse(403, "a GraphQL request weave.init does not send (or a key twice)", request)
            request.body = checked  # what W&B gets is what was checked
            return self._init_request(request, self._local_graphql)
        if kind == "server_info":
            return self._init_request(request, self._local_server_info)
        if kind == "write":
            return self._spool_write(route, request)
        if kind == "read":
            try:
                protocol.strict_loads(request.body or b"{}")
            except (ValueError, RecursionError) as err:
                return self._refuse(400, f"a read whose body is not JSON with each key once ({err})"[:200], request)
            return self._pass_through(route, request)
        return self._refuse(403, "not a request weave's client makes (route or method)", request)

    def _spool_write(self, route: str, request: Request) -> Response:
        ctype = request.headers.get("content-type", "application/json")
        try:
            local = protocol.answer_write(route, ctype, request.body)
        except (ValueError, KeyError, TypeError, RecursionError) as err:  # W&B would refuse it too
            return Response.json({"reason": f"malformed {route} request: {err}"}, status=400)
        try:
            with self._write_lock:
                body = self.repeats.new_part(route, local.body, local.request)
                if body is not None:
                    self.spool.append(Record(route=route, body=body, content_type=ctype,
                                             headers={k: request.headers[k] for k in _KEPT_HEADERS
                                                      if k in request.headers},
                                             project_id=local.project_id, digest=local.digest,
                                             row_digests=local.row_digests))
                    self.repeats.remember(route, body, local.request if body is local.body else None)
        except SpoolRefused as err:  # nothing acknowledged that is not on disk: weave retries a 503
            self.refused(503, "the spool cannot take records now (disk full, under its floor, or a failed write)",
                         request)
            return refusal(503, str(err), {"Retry-After": str(SPOOL_RETRY_AFTER_S)})
        self._wake.set()
        return Response.json(local.answer)

    def _init_request(self, request: Request, local_answer) -> Response:
        """Forward to W&B and remember its answer; when W&B is unreachable, answer from memory or locally."""
        if self.upstream is not None and not self._assumed_down():
            url = (self.upstream.graphql_url if access.kind_of(request.method, request.path) == "graphql"
                   else self.upstream.trace_url_for(protocol.SERVER_INFO_ROUTE))
            try:
                answer = self.upstream.request(request.method, url, request.body, request.headers,
                                               timeout_s=INIT_REQUEST_TIMEOUT_S)
                if answer.status_code < 500 and answer.status_code != 429:
                    self._remember(request, answer)
                    return Response(answer.status_code, answer.content,
                                    answer.headers.get("content-type", "application/json"))
                self._mark_down(f"W&B answered {answer.status_code}")
            except UpstreamDown as err:
                self._mark_down(str(err))
        return local_answer(request)

    def _local_graphql(self, request: Request) -> Response:
        viewer = (self.spool.read_json("viewer.json") or {}).get("viewer") or {}
        entity = self.entity or (viewer.get("defaultEntity") or {}).get("name")
        answer = protocol.answer_graphql(request.body, entity, viewer.get("username"))
        return Response.json(answer or {"data": None, "errors": [
            {"message": "W&B is unreachable; the trace relay answers only weave.init's GraphQL requests"}]})

    def _local_server_info(self, request: Request) -> Response:
        return Response.json(self.spool.read_json("server_info.json") or protocol.local_server_info())

    def _remember(self, request: Request, answer: httpx.Response) -> None:
        if answer.status_code != 200:
            return
        try:
            payload = answer.json()
            if protocol.trace_route(request.path) == protocol.SERVER_INFO_ROUTE:
                self.spool.write_json("server_info.json", payload)
            elif isinstance(payload, dict) and (payload.get("data") or {}).get("viewer"):
                self.spool.write_json("viewer.json", payload["data"])
        except (ValueError, OSError):  # a copy for outages only: a full disk must not fail weave.init
            return

    def _pass_through(self, route: str, request: Request) -> Response:
        if self.upstream is None or self._assumed_down():
            return Response.json({"reason": "W&B is unreachable from the trace relay: reads are not available"}, 503)
        try:
            answer = self.upstream.request(request.method, self.upstream.trace_url_for(route), request.body,
                                           request.headers)
        except UpstreamDown as err:
            self._mark_down(str(err))
            return Response.json({"reason": f"W&B is unreachable from the trace relay: {err}"}, 503)
        return Response(answer.status_code, answer.content, answer.headers.get("content-type", "application/json"))

    # --- forwarding ---------------------------------------------------------------------------------
    def _forward_forever(self) -> None:
        backoff = 0.5
        while not self._stop.is_set():
            try:
                result = self.forwarder.send_some()
            except UpstreamDown as err:
                self._mark_down(str(err))
                self._stop.wait(backoff)
                backoff = min(backoff * 2, self.max_retry_interval_s)
                continue
            except UpstreamRefused as err:
                if self.last_error != str(err):
                    logger.error("trace relay: %s; traces stay in %s", err, self.spool.root)
                self.last_error = str(err)
                self._stop.wait(60.0)
                continue
            except Exception as err:  # keep forwarding whatever one record does
                logger.exception("trace relay: forwarding failed")
                self.last_error = f"{type(err).__name__}: {err}"
                self._stop.wait(backoff)
                backoff = min(backoff * 2, self.max_retry_interval_s)
                continue
            if self._down_since is not None:
                logger.warning("trace relay: W&B reachable again after %.0f s; sending what was kept",
                               time.monotonic() - self._down_since)
                self._down_since, self.last_error = None, None
            backoff = 0.5
            if not (result.sent or result.rejected):
                self._wake.wait(1.0)
                self._wake.clear()

    def _mark_down(self, error: str) -> None:
        self._failed_at = time.monotonic()
        if self._down_since is None:
            self._down_since = time.monotonic()
            logger.warning("trace relay: W&B unreachable (%s); keeping traces in %s and retrying", error,
                           self.spool.root)
        self.last_error = error

    def _assumed_down(self) -> bool:
        return self._down_since is not None and time.monotonic() - self._failed_at < ASSUME_DOWN_FOR_S
