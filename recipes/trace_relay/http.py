"""A small threaded HTTP/1.1 server on one address that can be stopped and started again on the same port, and that
holds every client to its Limits (recipes/trace_relay/limits.py).

Shared by the trace relay and the test stand-in for W&B. Stopping closes the listening socket AND every open
keep-alive connection, so a client sees what it sees when a server goes away (connection refused / reset),
not a half-alive server still answering on pooled connections.

What a client gets before its app sees anything:
- with `only_uid` (the relay: its own uid), a connection from a process of another user of this machine is closed as
  it is accepted, before a slot, a thread or a byte is spent on it: the kernel says whose the client's socket is
  (recipes/trace_relay/peers.py); a client on another machine (only with a non-loopback address) is left to the app;
- a request target that is not a path on this server (`@host/x`, `http://host/x`, `//host`): 400;
- the app's `admit(request)` (optional), asked with the method, path and headers before any body is read: its
  answer, if it gives one (the relay refuses a client without the run's token, or a route weave never uses);
- Transfer-Encoding (chunked): 411; a Content-Length that is not one plain number: 400; above the limit: 413;
- a request not received whole within the client timeout: the connection is closed; one connection more than the
  limit: 503 and closed, without a thread.
Each refusal is closed after its answer (the body it did not read stays unread) and reported to the app's
`refused(status, reason, request)` (optional), which the relay logs once per reason.
"""

from __future__ import annotations

import json
import re
import socket
import sys
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol

from recipes.trace_relay.limits import Limits
from recipes.trace_relay.peers import is_local, peer_uid

_LENGTH = re.compile(r"[0-9]{1,15}")
_REAP_EVERY_S = 0.25


@dataclass
class Request:
    method: str
    path: str  # with the query string
    headers: dict[str, str]  # lower-case names
    body: bytes


@dataclass
class Response:
    status: int = 200
    body: bytes = b"{}"
    content_type: str = "application/json"
    headers: dict[str, str] = field(default_factory=dict)

    @classmethod
    def json(cls, value: Any, status: int = 200) -> Response:
        return cls(status=status, body=json.dumps(value).encode())


class App(Protocol):
    def handle(self, request: Request) -> Response: ...


def refusal(status: int, reason: str, headers: dict[str, str] | None = None) -> Response:
    response = Response.json({"reason": reason}, status)
    response.headers.update(headers or {})
    return response


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as weave's httpx client expects
    # an answer goes out as two writes (its head, then its body): with Nagle's algorithm the body waits for the
    # client's delayed acknowledgement of the head, ~40 ms on Linux, on every request of a keep-alive connection
    disable_nagle_algorithm = True
    server: _Server

    def setup(self) -> None:
        self.timeout = self.server.limits.client_timeout_s  # each read and write; idle keep-alive included
        super().setup()

    def handle_one_request(self) -> None:
        try:
            started = self.rfile.peek(1)  # an idle keep-alive connection waits here, up to the timeout
        except OSError:  # timed out, reset
            started = b""
        if not started:
            self.close_connection = True
            return
        # from its first byte, the whole request (line, headers, body) must arrive within the timeout
        self.server.watch(self.connection, time.monotonic() + self.server.limits.client_timeout_s)
        try:
            super().handle_one_request()
        finally:
            self.server.unwatch(self.connection)

    def __getattr__(self, name: str):
        if name.startswith("do_"):  # every method reaches _serve, which answers what it does not take with a 4xx
            return self._serve
        raise AttributeError(name)

    def _serve(self) -> None:
        head = Request(self.command, self.path, {k.lower(): v for k, v in self.headers.items()}, b"")
        response = self._screen(head)
        if response is None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            if len(body) < length:  # the client left, or was cut off for taking too long
                self.close_connection = True
                return
            self.server.unwatch(self.connection)
            head.body = body
            try:
                response = self.server.app.handle(head)
            except Exception as err:  # a bug here must show as a 500 the client retries, not a dropped socket
                response = Response.json({"reason": f"{type(err).__name__}: {err}"}, status=500)
        else:
            self.close_connection = True  # its body, if any, was not read
            response.headers["Connection"] = "close"
        self.send_response(response.status)
        self.send_header("Content-Type", response.content_type)
        self.send_header("Content-Length", str(len(response.body)))
        for name, value in response.headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(response.body)

    def _screen(self, head: Request) -> Response | None:
        """A refusal for a request that must not be read further, or None."""
        if not head.path.startswith("/") or head.path.startswith("//"):
            return self._refuse(head, 400, "the request target is not a path on this server")
        admit = getattr(self.server.app, "admit", None)
        answer = admit(head) if admit is not None else None
        if answer is not None:
            return answer  # the app reported it itself
        if "Transfer-Encoding" in self.headers:
            return self._refuse(head, 411, "send a Content-Length: this server takes no chunked bodies")
        lengths = set(self.headers.get_all("Content-Length") or [])
        if len(lengths) > 1 or not all(_LENGTH.fullmatch(value) for value in lengths):
            return self._refuse(head, 400, "Content-Length must be one non-negative number")
        if lengths and int(lengths.pop()) > self.server.limits.max_body_bytes:
            return self._refuse(head, 413, f"a body above {self.server.limits.max_body_bytes} bytes")
        return None

    def _refuse(self, head: Request, status: int, reason: str) -> Response:
        self.server.report(status, reason, head)
        return refusal(status, reason)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        pass


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True  # rebind the same port right after a stop (TIME_WAIT)
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], app: App, limits: Limits,
                 listening: socket.socket | None = None, only_uid: int | None = None) -> None:
        self.app = app
        self.limits = limits
        self.only_uid = only_uid
        self._connections: set[socket.socket] = set()  # accepted and being served (one thread each)
        self._deadlines: dict[socket.socket, float] = {}  # connections in the middle of receiving a request
        self._lock = threading.Lock()
        self._closed = threading.Event()
        super().__init__(address, _Handler, bind_and_activate=listening is None)
        if listening is not None:  # already bound and listening (handed down by a supervisor)
            self.socket.close()
            self.socket = listening
            self.server_address = listening.getsockname()
        threading.Thread(target=self._reap, name="http-deadlines", daemon=True).start()

    def verify_request(self, request: socket.socket, client_address) -> bool:
        """In the accepting thread, before anything else: a client of this machine must be `only_uid`'s. A refused
        connection is closed by the caller (socketserver), with no answer: it cost one lookup."""
        if self.only_uid is None:
            return True
        try:
            uid = peer_uid(request)
        except OSError:  # the client left already, or the kernel cannot say: no one to serve
            uid = None
        if uid == self.only_uid or (uid is None and not is_local(client_address[0])):
            return True
        self.report(403, "a connection from another user of this machine (or one gone before it was looked up)",
                    None)
        return False

    def process_request(self, request: socket.socket, client_address) -> None:
        with self._lock:
            busy = len(self._connections) >= self.limits.max_connections
            if not busy:
                self._connections.add(request)
        if busy:
            self._turn_away(request)
            return
        super().process_request(request, client_address)  # a thread for this connection

    def _turn_away(self, request: socket.socket) -> None:
        body = json.dumps({"reason": "too many connections; try again"}).encode()
        try:
            request.settimeout(0.1)
            request.sendall(b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\n"
                            b"Connection: close\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        except OSError:
            pass
        self.report(503, f"more than {self.limits.max_connections} connections at once", None)
        self.close_request(request)

    def shutdown_request(self, request: socket.socket) -> None:
        with self._lock:
            self._connections.discard(request)
            self._deadlines.pop(request, None)
        super().shutdown_request(request)

    def watch(self, conn: socket.socket, deadline: float) -> None:
        with self._lock:
            self._deadlines[conn] = deadline

    def unwatch(self, conn: socket.socket) -> None:
        with self._lock:
            self._deadlines.pop(conn, None)

    def _reap(self) -> None:
        """Cut off the clients that take longer than the timeout to send one request (a trickle)."""
        while not self._closed.wait(_REAP_EVERY_S):
            now = time.monotonic()
            with self._lock:
                late = [conn for conn, deadline in self._deadlines.items() if deadline < now]
                for conn in late:
                    del self._deadlines[conn]
            for conn in late:
                self.report(408, f"a request not received whole within {self.limits.client_timeout_s:g} s", None)
                _shut(conn)

    def report(self, status: int, reason: str, head: Request | None) -> None:
        refused = getattr(self.app, "refused", None)
        if refused is not None:
            refused(status, reason, head)

    def handle_error(self, request, client_address) -> None:
        """A client gone before its answer (a health probe that timed out while no relay ran) is no error."""
        if not isinstance(sys.exc_info()[1], OSError):
            super().handle_error(request, client_address)

    def server_close(self) -> None:
        self._closed.set()
        super().server_close()

    def close_connections(self) -> None:
        with self._lock:
            conns, self._connections = list(self._connections), set()
        for conn in conns:
            _shut(conn)


def _shut(conn: socket.socket) -> None:
    try:
        conn.shutdown(socket.SHUT_RDWR)  # a thread blocked reading it wakes to an end of stream
    except OSError:
        pass


class LoopbackHTTPServer:
    """Serves `app` on host:port (port 0: an ephemeral one, kept across restarts), or on `listening`, a socket
    already bound and listening (used by the first start only), holding each client to `limits`; with `only_uid`,
    to the processes of that user of this machine (and clients on other machines, left to the app)."""

    def __init__(self, app: App, host: str = "127.0.0.1", port: int = 0,
                 listening: socket.socket | None = None, limits: Limits | None = None,
                 only_uid: int | None = None) -> None:
        self.app = app
        self.only_uid = only_uid
        self.host = host
        self.port = port
        self.limits = limits or Limits()
        self._listening = listening
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def running(self) -> bool:
        return self._server is not None

    def start(self) -> LoopbackHTTPServer:
        if self._server is None:
            listening, self._listening = self._listening, None
            self._server = _Server((self.host, self.port), self.app, self.limits, listening, self.only_uid)
            self.port = self._server.server_address[1]
            self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.1},
                                            name=f"http-{self.port}", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        server.shutdown()
        server.server_close()
        server.close_connections()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def __enter__(self) -> LoopbackHTTPServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
