"""weave's batch sender posts the JSON it has already encoded, once.

weave 0.54 sends finished calls in batches from a background thread of every traced process
(weave/trace_server_bindings/remote_http_trace_server.py: `_flush_calls_complete` encodes the batch to JSON bytes,
then `_send_calls_complete_to_server` parses those bytes back into Python objects and hands them to its generated
API client, whose `v2_calls.complete` walks every value of every call against the request's type hints
(`maybe_transform`) and encodes it all to JSON again). For the calls the recipe traces the walk changes nothing:
the only formatted fields, `started_at` and `ended_at`, are already ISO-8601 strings in the first encoding. Measured
on an agent-loop worker (scripts/bench_rollout.py), the parse, walk and second encoding cost more CPU than
everything the traced calls do in the agent loop's own thread.

`post_encoded_batches` makes the sender post the first encoding as the request body, to the same route, through the
same client (its headers, authentication and timeouts) and under weave's own retry decorator. It changes only
that one method, only where weave still has the shape it was written against; anything else is left to weave.
"""

from __future__ import annotations

import logging

logger = logging.getLogger(__name__)

_COMPLETE_ROUTE = "/v2/{entity}/{project}/calls/complete"  # v2_calls.complete's route in weave's generated client


def post_encoded_batches() -> bool:
    """Patch weave's sender in this process (idempotent). True when the sender posts its encoded batches as is."""
    try:
        from weave.trace_server_bindings.remote_http_trace_server import RemoteHTTPTraceServer
        from weave.utils.retry import with_retry
        from weave.vendor.weave_server_sdk._utils import path_template
    except ImportError:  # another weave: its own sender stays
        return False
    original = RemoteHTTPTraceServer.__dict__.get("_send_calls_complete_to_server")
    if original is None or not hasattr(RemoteHTTPTraceServer, "_update_client_headers"):
        logger.debug("weave's sender is not the one recipes/trace_relay/sender.py knows; left as it is")
        return False
    if getattr(original, "_recipe_posts_bytes", False):
        return True

    @with_retry
    def send_calls_complete(self, entity: str, project: str, encoded_data: bytes) -> None:
        self._update_client_headers()  # what weave's own sender does first: the retry id and extra headers
        self._stainless_client.post(path_template(_COMPLETE_ROUTE, entity=entity, project=project),
                                    content=encoded_data, cast_to=object,
                                    options={"headers": {"Content-Type": "application/json"}})

    send_calls_complete._recipe_posts_bytes = True
    RemoteHTTPTraceServer._send_calls_complete_to_server = send_calls_complete
    return True
