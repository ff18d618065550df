"""Call writes the relay already holds, so a client's repeat is answered without being kept twice.

A weave client repeats a request whose answer it did not get. Behind a keeper (keeper.py) that happens when the
relay was down longer than WEAVE_HTTP_TIMEOUT (30 s): the request waited in the listening socket's backlog, the
client gave up and sent it again, and the next relay receives both; and when a relay was killed after it kept a
request but before the client read the answer. Calls are keyed by id (a start, an end, or a complete call);
objects, tables and files are keyed by digest on W&B, so a repeat of one is harmless and is not tracked. The
memory holds the most recent MAX_REMEMBERED calls: this process's, and those of the spool segment it took over
(`seeded`), so a repeat of what a killed relay kept is kept once.
"""

from __future__ import annotations

import json
from collections import deque

from recipes.trace_relay import protocol

MAX_REMEMBERED = 200_000  # ~40 MB at most; weave repeats within minutes, far fewer calls than this


class RepeatFilter:
    def __init__(self, capacity: int = MAX_REMEMBERED) -> None:
        self._seen: set[tuple[str, str]] = set()
        self._order: deque[tuple[str, str]] = deque()
        self.capacity = capacity
        self.repeats = 0  # call writes dropped as repeats

    @classmethod
    def seeded(cls, records, capacity: int = MAX_REMEMBERED) -> RepeatFilter:
        """A filter that already knows the calls of `records` (spool records, oldest first)."""
        memory = cls(capacity)
        for record in records:
            try:
                memory.remember(record.route, record.body)
            except (ValueError, KeyError, TypeError):  # a record W&B will refuse anyway
                continue
        return memory

    def new_part(self, route: str, body: bytes, request=None) -> bytes | None:
        """`body` without the calls already held: None when nothing is left, `body` itself when all is new.
        `request`: `body` already parsed, if it was. Call remember() once what it returned is durable."""
        keys = _keys(route, body, request)
        if not keys or not any(key in self._seen for key in keys):
            return body
        if protocol.CALLS_COMPLETE.fullmatch(route):
            req = request if request is not None else json.loads(body)
            fresh = [item for item in req["batch"] if ("complete", item["id"]) not in self._seen]
            self.repeats += len(req["batch"]) - len(fresh)
            return protocol.encode({**req, "batch": fresh}) if fresh else None
        self.repeats += 1
        return None

    def remember(self, route: str, body: bytes, request=None) -> None:
        for key in _keys(route, body, request):
            if key not in self._seen:
                self._seen.add(key)
                self._order.append(key)
        while len(self._order) > self.capacity:
            self._seen.discard(self._order.popleft())


def _keys(route: str, body: bytes, request=None) -> list[tuple[str, str]]:
    if protocol.CALLS_COMPLETE.fullmatch(route):
        return [("complete", item["id"]) for item in (request if request is not None else json.loads(body))["batch"]]
    if route.endswith(("/call/start", "/call/end")):
        kind = "start" if route.endswith("/call/start") else "end"
        call = (request if request is not None else json.loads(body))[kind]
        return [(kind, call["id"])] if call.get("id") else []
    return []
