"""What the W&B endpoint acknowledged: a recorder between the relay and the endpoint."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from datetime import datetime

# ---- what the W&B endpoint acknowledged -----------------------------------------------------------------------

class AckRecorder:
    """Sits between the relay and the W&B endpoint: forwards every request unchanged and notes, for each call the
    endpoint answered 2xx, its trace, attributes, end time, size on the wire (its start and end as the client
    encodes them: compact JSON, what W&B counts), a root's assistant turns and when the answer came back."""

    _DROP = {"host", "content-length", "connection", "keep-alive", "transfer-encoding", "accept-encoding"}

    def __init__(self, base_url: str, trace_url: str) -> None:
        import httpx

        self.base_url, self.trace_url = base_url.rstrip("/"), trace_url.rstrip("/")
        self.http = httpx.Client(timeout=120)
        self.calls: dict[str, dict] = {}
        self.starts: Counter[str] = Counter()  # call id -> starts acknowledged (more than 1: sent twice)
        self.lock = threading.Lock()

    def handle(self, request):
        from recipes.trace_relay import protocol
        from recipes.trace_relay.http import Response

        route = protocol.trace_route(request.path)
        url = (self.trace_url + request.path.removeprefix(protocol.TRACE_PREFIX)
               if request.path.startswith(protocol.TRACE_PREFIX + "/") else self.base_url + request.path)
        headers = {k: v for k, v in request.headers.items() if k not in self._DROP}
        answer = self.http.request(request.method, url, content=request.body or None, headers=headers)
        if 200 <= answer.status_code < 300 and protocol.is_write(request.method, route):
            acked = time.time()
            pairs = protocol.complete_calls(route, request.body)
            sizes = wire_sizes(route, request.body, pairs)
            with self.lock:
                for (start, end), size in zip(pairs, sizes, strict=True):
                    call = self.calls.setdefault((start or end)["id"], {"bytes": 0})
                    call["bytes"] += size
                    turns = assistant_turns(end.get("output")) if end else None
                    if turns is not None:  # a root's output: the recipe's chat messages
                        call["turns"] = turns
                    if start:
                        self.starts[start["id"]] += 1
                        attributes = start.get("attributes") or {}
                        call.update(trace_id=start.get("trace_id"), parent_id=start.get("parent_id"),
                                    op=str(start.get("op_name")), **{k: attributes.get(k) for k in (
                                        "experiment_name", "step", "sample_index", "rollout_n")})
                    if end:
                        call.update(ended_at=_timestamp(end.get("ended_at")), acked_at=acked)
        return Response(answer.status_code, answer.content, answer.headers.get("content-type", "application/json"))

    def phase_calls(self, experiment: str) -> list[dict]:
        """The complete calls (start and end acknowledged) of one phase, each with its trajectory's root attributes."""
        with self.lock:
            calls = [dict(c, id=i) for i, c in self.calls.items() if "op" in c and "acked_at" in c]
        roots = {c["trace_id"]: c for c in calls if c["parent_id"] is None}
        mine = []
        for call in calls:
            root = roots.get(call["trace_id"])
            if root is not None and root.get("experiment_name") == experiment:
                mine.append(dict(call, step=root["step"], root_key=(root["step"], root["sample_index"],
                                                                     root["rollout_n"])))
        return mine


def wire_sizes(route: str, body: bytes, pairs: list[tuple[dict, dict]]) -> list[int]:
    """Bytes of each call's part of a write, as weave encodes it (pydantic_core.to_json: compact, UTF-8): a
    calls/complete item whole, else its start or end; their sum is the body less its framing."""
    from pydantic_core import to_json

    from recipes.trace_relay import protocol

    if protocol.CALLS_COMPLETE.fullmatch(route):
        return [len(to_json(item)) for item in json.loads(body)["batch"]]
    return [len(to_json(start or end)) for start, end in pairs]


def assistant_turns(output) -> int | None:
    """The model's turns in a root's output (the recipe's chat messages), or None without them."""
    messages = output.get("messages") if isinstance(output, dict) else None
    if not isinstance(messages, list):
        return None
    return sum(isinstance(m, dict) and m.get("role") == "assistant" for m in messages)


def _timestamp(value) -> float | None:
    if not value:
        return None
    return datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()
