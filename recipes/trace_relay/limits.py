"""What one client may cost the trace relay: the bounds its HTTP server and its spool hold every request to.

MAX_BODY_BYTES: a request body above it is refused (413) from its Content-Length, before a byte of it is read. weave
splits a batch the relay refuses as too large and sends the halves (weave/trace_server_bindings/http_utils.py, 413
and 422), so only a single call above the bound is lost, and W&B itself takes none above ~3.5 MiB. 8 MiB leaves
room for every call W&B would store, while N clients cost at most N x 8 MiB of memory.
CLIENT_TIMEOUT_S: a client that sends nothing for this long (an idle keep-alive connection, a half-sent request), or
takes longer than this to send one whole request (a trickle), is disconnected.
MAX_CONNECTIONS: connections served at once (a thread each); one more is answered 503 and closed at once. weave keeps
a few connections per client; a node's agent-loop workers hold a few dozen.
MIN_FREE_BYTES: the spool takes no record when its disk would keep less than this free: the client is answered 503 and
retries, the node keeps room for everything else it runs.
"""

from __future__ import annotations

from dataclasses import dataclass

MAX_BODY_BYTES = 8 * 1024 * 1024
CLIENT_TIMEOUT_S = 30.0
MAX_CONNECTIONS = 128
MIN_FREE_BYTES = 1024 * 1024 * 1024


@dataclass(frozen=True)
class Limits:
    max_body_bytes: int = MAX_BODY_BYTES
    client_timeout_s: float = CLIENT_TIMEOUT_S
    max_connections: int = MAX_CONNECTIONS
