"""Who may use the trace relay, and for what: the run's token, and only the requests weave 0.54's client makes.

The relay sends what it forwards to W&B with its owner's key, so it must not be anyone's way in. A client proves it is
one of the run's processes with the token the launcher made for this launch (a random secret handed to the relays and
the workers; recipes/launch/relays.py): weave sends it as its API key, in `Authorization: Basic api:<token>` (or
`Bearer <token>`), and it is compared in constant time, from the request's headers, before any body is read: the
health probe presents it too. (Before that, a process of another user of the node never got a connection:
recipes/trace_relay/http.py.)

With the token, a client may still make only what weave's client sends for tracing (its code in site-packages:
weave/trace_server_bindings/remote_http_trace_server.py and weave/vendor/weave_server_sdk/resources/, the GraphQL of
weave/compat/wandb/wandb_thin/internal_api.py): the trace writes the relay keeps (protocol.is_write), `GET
/server_info`, the reads weave makes to resolve refs and query calls, and weave.init's four GraphQL documents, exactly
as weave writes them (its project and viewer queries, server info, and the UpsertModel mutation that creates the
project). Everything else (deletes, other mutations, other routes and methods) is refused: 401 without the token,
403 with it. A route's entity and project must be plain path segments, so nothing a client writes can turn the URL the
relay builds toward another host or another route (upstream.Upstream.trace_url). A GraphQL request is sent on as it
was checked (weave_graphql), and JSON with a key twice is refused (protocol.strict_loads): what the relay judged is
what W&B reads.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import re
from urllib.parse import unquote

from recipes.trace_relay import protocol
from recipes.trace_relay.names import RELAY_HEALTH_PATH

# reads of weave's client (ref resolution, call queries): POST with a JSON body, passed through to W&B
READ_ROUTES = frozenset({"/calls/stream_query", "/calls/query_stats", "/call/read", "/obj/read", "/objs/query",
                         "/table/query", "/refs/read_batch", "/file/content"})
_SEGMENT = re.compile(r"[A-Za-z0-9._~!$&'()*+,;=:%-]+")  # RFC 3986 path characters, `@` left out
_UNSAFE_ONCE_DECODED = re.compile(r"[/\\?#@\s\x00-\x1f\x7f]")
_weave_documents: frozenset[str] | None = None


def token_matches(authorization: str | None, token: str) -> bool:
    """Whether an Authorization header carries `token` (Basic, any user name, or Bearer), in constant time."""
    if not authorization or not token:
        return False
    scheme, _, credentials = authorization.strip().partition(" ")
    if scheme.lower() == "bearer":
        presented = credentials.strip()
    elif scheme.lower() == "basic":
        try:
            presented = base64.b64decode(credentials.strip(), validate=True).decode().partition(":")[2]
        except (binascii.Error, UnicodeDecodeError):
            return False
    else:
        return False
    return hmac.compare_digest(presented.encode(), token.encode())


def safe_segment(segment: str) -> bool:
    """A path segment that stays one segment on W&B, escaped or not: no separator, no dot segment, no `@`."""
    text = unquote(segment)
    return bool(_SEGMENT.fullmatch(segment)) and text not in (".", "..") and not _UNSAFE_ONCE_DECODED.search(text)


def kind_of(method: str, path: str) -> str | None:
    """What a request is: "health", "graphql", "server_info", "write", "read", or None when weave never makes it."""
    route = protocol.trace_route(path)
    if path == RELAY_HEALTH_PATH:
        return "health" if method == "GET" else None
    if path.split("?", 1)[0] == protocol.GRAPHQL_PATH:
        return "graphql" if method == "POST" else None
    if route == protocol.SERVER_INFO_ROUTE:
        return "server_info" if method == "GET" else None
    if not safe_route(route):
        return None
    if protocol.is_write(method, route):
        return "write"
    if method == "POST" and route in READ_ROUTES:
        return "read"
    return None


def safe_route(route: str) -> bool:
    """A route weave's client sends and the relay may forward: one of the fixed ones, or a v2 write whose entity and
    project are plain segments."""
    if route in READ_ROUTES or route == protocol.SERVER_INFO_ROUTE or route in protocol.WRITE_ROUTES:
        return True
    v2 = protocol.V2_CALL_WRITE.fullmatch(route)
    return v2 is not None and safe_segment(v2["entity"]) and safe_segment(v2["project"])


GRAPHQL_KEYS = frozenset({"query", "variables", "operationName"})  # what a GraphQL request over HTTP holds


def weave_graphql(body: bytes) -> bytes | None:
    """The request to send W&B if this GraphQL request is one of the documents weave's client sends, as it writes them
    (variables free), else None. What is sent is what was checked, encoded again: no key twice, no key but the three
    of a GraphQL request (a server that reads keys in any case would otherwise find a second `QUERY`)."""
    from graphql import GraphQLError, parse, print_ast

    try:
        request = protocol.strict_loads(body)
        query = request["query"]
        if set(request) - GRAPHQL_KEYS or not isinstance(query, str) or print_ast(parse(query)) not in _documents():
            return None
        if not isinstance(request.get("variables") or {}, dict) or not isinstance(request.get("operationName", ""),
                                                                                   str | None):
            return None
        return protocol.encode(request)
    except (ValueError, KeyError, AttributeError, TypeError, GraphQLError, RecursionError):
        return None


def _documents() -> frozenset[str]:
    global _weave_documents
    if _weave_documents is None:
        from graphql import print_ast

        with protocol.WEAVE_IMPORT:
            from weave.compat.wandb.wandb_thin.internal_api import Api

        _weave_documents = frozenset(print_ast(getattr(Api, name).document) for name in (
            "PROJECT_QUERY", "UPSERT_PROJECT_MUTATION", "VIEWER_DEFAULT_ENTITY_QUERY", "SERVER_INFO_QUERY"))
    return _weave_documents
