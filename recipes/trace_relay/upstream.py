"""W&B as the relay reaches it, and the forwarder that sends a spool there in order.

The relay authenticates with ITS OWN key (WANDB_API_KEY, or the netrc entry for the upstream host): what a
client sent as auth is never stored, so a spool holds no secret and can be uploaded from any machine.
Delivery is at least once: a record whose answer was lost is sent again (W&B keys calls by id and objects
by digest, so a repeat lands on the same row).
"""

from __future__ import annotations

import json
import logging
import os
import re
import time
from dataclasses import dataclass, field
from urllib.parse import urlsplit, urlunsplit

import httpx

from recipes.credentials import wandb_api_key
from recipes.trace_relay import access, protocol
from recipes.trace_relay.spool import Record, Spool

logger = logging.getLogger(__name__)

SAAS_BASE_URL = "https://api.wandb.ai"
SAAS_TRACE_URL = "https://trace.wandb.ai"
MAX_BATCH_CALLS = 1000  # weave's own limit per calls/complete request
MAX_BATCH_BYTES = 10 * 1024 * 1024  # below weave's 31 MiB
_PROJECT_QUERY = ("query Project($name: String!, $entityName: String!) "
                  "{ project(name: $name, entityName: $entityName) { name } }")
_UPSERT_PROJECT = ("mutation UpsertModel($name: String!, $entity: String!) { upsertModel(input: { name: $name, "
                   "entityName: $entity }) { model { name } } }")


# the only headers of a client's that reach W&B: what weave's client sends and W&B reads
# (weave/trace_server_bindings/remote_http_trace_server.py, http_utils.py); the auth is the relay's own, transport
# headers are each connection's, and anything else (a method override, cookies, forwarding headers) stays here
FORWARDED_HEADERS = frozenset({"content-type", "accept", "user-agent", "x-weave-client-capabilities",
                               "x-weave-trace-id", "x-weave-retry-id"})


class UpstreamDown(RuntimeError):
    """W&B did not answer, or answered 429/5xx: try again later."""


class UpstreamRefused(RuntimeError):
    """W&B refused the relay's credentials or the project: nothing will go through until that is fixed."""


class UnsafeRoute(ValueError):
    """A route the relay will not send anywhere (not one weave's client uses, or one that would leave W&B's host)."""


def _server_url(url: str, what: str) -> str:
    """`url` as a server's root (scheme, host, optional port and path prefix); UpstreamRefused when it is not one."""
    parts = urlsplit(url.rstrip("/"))
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.username is not None \
            or parts.password is not None or parts.query or parts.fragment:
        raise UpstreamRefused(f"{what} {url!r} is not a server URL: give scheme://host[:port][/path], no user, "
                              "query or fragment")
    return urlunsplit((parts.scheme, parts.netloc, parts.path, "", ""))


@dataclass
class Upstream:
    base_url: str
    trace_url: str
    api_key: str = field(repr=False)
    timeout_s: float = 30.0
    _http: httpx.Client | None = field(default=None, init=False, repr=False)

    @classmethod
    def from_env(cls, base_url: str | None = None, trace_url: str | None = None) -> Upstream:
        """W&B at `base_url` (default WANDB_BASE_URL, else W&B's cloud); its trace server as weave finds it."""
        base = _server_url(base_url or os.environ.get("WANDB_BASE_URL") or SAAS_BASE_URL, "the W&B URL")
        trace = _server_url(trace_url or (None if base_url else os.environ.get("WF_TRACE_SERVER_URL"))
                            or (SAAS_TRACE_URL if base == SAAS_BASE_URL else base + protocol.TRACE_PREFIX),
                            "the W&B trace server URL")
        key = wandb_api_key(base_url=base)
        if not key:
            raise UpstreamRefused(f"no W&B credentials for {base}: export WANDB_API_KEY=... (or `wandb login "
                                  f"--host {base}`)")
        return cls(base, trace, key)

    def request(self, method: str, url: str, body: bytes = b"", headers: dict[str, str] | None = None,
                timeout_s: float | None = None) -> httpx.Response:
        if self._http is None:  # one pool: forwarding reuses its connections to W&B
            self._http = httpx.Client(auth=("api", self.api_key), timeout=self.timeout_s)
        headers = {k: v for k, v in (headers or {}).items() if k.lower() in FORWARDED_HEADERS}
        try:
            return self._http.request(method, url, content=body or None, headers=headers,
                                      timeout=timeout_s or self.timeout_s)
        except httpx.HTTPError as err:
            raise UpstreamDown(f"{url}: {type(err).__name__}: {err}") from err

    def trace_url_for(self, route: str) -> str:
        """W&B's URL for a trace-server route (as protocol.trace_route gives it: no `/traces`, no query), built from
        the parts of the trace server's URL, on its host and nowhere else. UnsafeRoute for a route weave's client
        does not send (access.safe_route)."""
        if not access.safe_route(route):
            raise UnsafeRoute(f"not a trace server route the relay sends: {route[:200]!r}")
        return _on_host(self.trace_url, route)

    @property
    def graphql_url(self) -> str:
        return _on_host(self.base_url, protocol.GRAPHQL_PATH)

    def graphql(self, query: str, variables: dict) -> dict:
        response = self.request("POST", self.graphql_url,
                                json.dumps({"query": query, "variables": variables}).encode(),
                                {"content-type": "application/json"})
        _raise_for(response, "GraphQL")
        payload = response.json()
        if payload.get("errors"):
            raise UpstreamRefused(f"W&B GraphQL error: {payload['errors']}")
        return payload.get("data") or {}

    def ensure_project(self, project_id: str) -> None:
        """Create entity/project on W&B if missing: a spool sent later (offline run) may be its first use."""
        entity, project = project_id.split("/", 1)
        if (self.graphql(_PROJECT_QUERY, {"name": project, "entityName": entity}).get("project")) is None:
            self.graphql(_UPSERT_PROJECT, {"name": project, "entity": entity})


def _on_host(server: str, route: str) -> str:
    """`server`'s path prefix joined with `route`, the host taken from `server` only."""
    base = urlsplit(server)
    url = urlunsplit((base.scheme, base.netloc, base.path.rstrip("/") + route, "", ""))
    if urlsplit(url).netloc != base.netloc:  # cannot happen for a route that starts with "/": checked all the same
        raise UnsafeRoute(f"{route[:200]!r} would leave {base.netloc}")
    return url


def _raise_for(response: httpx.Response, what: str) -> None:
    if response.status_code in (401, 403):
        raise UpstreamRefused(f"W&B refused {what} ({response.status_code}): {response.text[:300]}")
    if response.status_code == 429 or response.status_code >= 500:
        raise UpstreamDown(f"W&B answered {what} with {response.status_code}: {response.text[:300]}")


class DigestMap:
    """Digests the relay answered with that W&B computed differently (values holding refs, see protocol),
    kept in the spool so later records, and a later upload, point at what W&B actually stored."""

    _REF = re.compile(rb'weave:///[^"\s\\]+')
    _TOKEN = re.compile(rb"(?<=[:/])[A-Za-z0-9]{20,}(?=/|$)")

    def __init__(self, spool: Spool) -> None:
        self.spool = spool
        self.map: dict[str, str] = spool.read_json("digests.json") or {}

    def learn(self, local: str | None, real: str | None) -> None:
        if local and real and local != real and self.map.get(local) != real:
            self.map[local] = real
            self.spool.write_json("digests.json", self.map)

    def rewrite(self, body: bytes) -> bytes:
        if not self.map:
            return body
        table = {k.encode(): v.encode() for k, v in self.map.items()}
        return self._REF.sub(lambda ref: self._TOKEN.sub(lambda t: table.get(t[0], t[0]), ref[0]), body)


@dataclass
class SendResult:
    sent: int = 0
    rejected: int = 0


class Forwarder:
    """Sends a spool's records to W&B in order; consecutive calls/complete records go as one request."""

    def __init__(self, spool: Spool, upstream: Upstream) -> None:
        self.spool = spool
        self.upstream = upstream
        self.digests = DigestMap(spool)
        self._projects_ready: set[str] = set()
        self.rejected_total = 0
        self._checked_first = False  # whether W&B was asked which calls of the first group it already has

    def send_some(self) -> SendResult:
        """Send the next group of records. Raises UpstreamDown / UpstreamRefused, leaving them pending."""
        pending = self.spool.iter_pending()
        try:
            group, merged = _leading_group(pending)
        finally:
            pending.close()
        if not group:
            return SendResult()
        if not access.safe_route(group[0].route):  # a spool written by hand, or by something else than a relay
            self._set_aside(group[0], f"not a trace server route the relay sends: {group[0].route[:200]!r}")
            self.spool.mark_sent(group[:1])
            return SendResult(rejected=1)
        for project_id in {r.project_id for r in group if r.project_id} - self._projects_ready:
            self.upstream.ensure_project(project_id)
            self._projects_ready.add(project_id)
        if not self._checked_first and merged:
            # a sender killed between W&B's answer and its checkpoint left these pending: send only what W&B lacks
            merged = self._not_yet_stored(group[0].project_id, merged)  # UpstreamDown: checked on the next try
            if not merged:
                self._checked_first = True
                self.spool.mark_sent(group)
                return SendResult(sent=len(group))
            if len(group) == 1:
                group[0].body = protocol.encode({**json.loads(group[0].body), "batch": merged})
        self._checked_first = True
        if len(group) > 1:
            response, posted = self._post(group[0], protocol.encode({"batch": merged}))
            if response.status_code < 400:
                self.spool.mark_sent(group, posted)
                return SendResult(sent=len(group))
            group = group[:1]  # W&B refused the merged request: find the record it refuses, one at a time
        record = group[0]
        response, posted = self._post(record, record.body)
        if response.status_code < 400:
            self._learn_digests(record, response)
            self.spool.mark_sent(group, posted)
            return SendResult(sent=1)
        self._reject(record, response)
        self.spool.mark_sent(group)
        return SendResult(rejected=1)

    def _not_yet_stored(self, project_id: str | None, calls: list[dict]) -> list[dict]:
        """The calls W&B does not hold yet (all of them when it cannot say which: this read only saves repeats).
        Raises UpstreamDown when W&B does not answer (nothing could be sent then either)."""
        ids = [call.get("id") for call in calls if call.get("id")]
        if not project_id or not ids:
            return calls
        query = {"project_id": project_id, "filter": {"call_ids": ids}, "columns": ["id"]}
        answer = self.upstream.request("POST", self.upstream.trace_url_for("/calls/stream_query"),
                                       json.dumps(query).encode(), {"content-type": "application/json"})
        if answer.status_code != 200:
            return calls
        try:
            stored = {json.loads(line)["id"] for line in answer.text.splitlines() if line.strip()}
        except (ValueError, KeyError, TypeError):
            return calls
        if stored:
            logger.warning("trace relay: W&B already holds %d of the %d calls a previous relay was sending; "
                           "sending the other %d", len(stored & set(ids)), len(ids), len(set(ids) - stored))
        return [call for call in calls if call.get("id") not in stored]

    def _post(self, record: Record, body: bytes) -> tuple[httpx.Response, int]:
        """W&B's answer, and the body bytes it was sent (what W&B counts as trace data received)."""
        if record.content_type.startswith("application/json"):
            body = self.digests.rewrite(body)
        headers = {**record.headers, "content-type": record.content_type}
        response = self.upstream.request("POST", self.upstream.trace_url_for(record.route), body, headers)
        _raise_for(response, record.route)
        return response, len(body)

    def _learn_digests(self, record: Record, response: httpx.Response) -> None:
        if not record.digest:
            return
        answer = response.json()
        self.digests.learn(record.digest, answer.get("digest"))
        for local, real in zip(record.row_digests, answer.get("row_digests") or [], strict=False):
            self.digests.learn(local, real)

    def _reject(self, record: Record, response: httpx.Response) -> None:
        """W&B will never take this record (4xx): keep it beside the spool, say so, and go on with the rest."""
        self._set_aside(record, f"W&B rejected it: {response.status_code} {response.text[:500]}")

    def _set_aside(self, record: Record, reason: str) -> None:
        self.rejected_total += 1
        logger.error("trace relay: a %s request set aside (%s); kept in %s", record.route[:200], reason,
                     self.spool.root / "rejected.spool")
        record.headers = {**record.headers, "x-relay-rejected": reason}
        self.spool.keep_rejected(record)

    def drain(self, deadline: float, should_stop=lambda: False) -> str | None:
        """Send until nothing is pending or the deadline passes, retrying while W&B is down. Returns why it
        stopped early (the last error), or None when everything is sent."""
        backoff, error = 0.5, None
        while self.spool.pending_count > 0 and not should_stop():
            try:
                self.send_some()
                backoff, error = 0.5, None
            except UpstreamRefused as err:
                return str(err)
            except UpstreamDown as err:
                error = str(err)
                if time.monotonic() + backoff > deadline:
                    return error
                time.sleep(backoff)
                backoff = min(backoff * 2, 15.0)
            if time.monotonic() > deadline:
                break
        return error if self.spool.pending_count else None


def _leading_group(pending) -> tuple[list[Record], list]:
    """The next record, plus the calls/complete records right after it for the same project within weave's
    batch limits, and (for those) their calls as one batch."""
    first = next(pending, None)
    if first is None or not protocol.CALLS_COMPLETE.fullmatch(first.route):
        return ([first] if first else []), []
    group, merged, size = [first], json.loads(first.body)["batch"], len(first.body)
    for record in pending:
        size += len(record.body)
        if record.route != first.route or size > MAX_BATCH_BYTES:
            break
        items = json.loads(record.body)["batch"]
        if len(merged) + len(items) > MAX_BATCH_CALLS:
            break
        group.append(record)
        merged.extend(items)
    return group, merged
