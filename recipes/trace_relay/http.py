"""A small threaded HTTP/1.1 server on one address that can be stopped and started again on the same port.

Shared by the trace relay and the test stand-in for W&B. Stopping closes the listening socket AND every open
keep-alive connection, so a client sees what it sees when a server goes away (connection refused / reset),
not a half-alive server still answering on pooled connections.
"""

from __future__ import annotations

import json
import socket
import sys
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol


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


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as weave's httpx client expects
    server: _Server

    def setup(self) -> None:
        super().setup()
        self.server.track(self.connection, add=True)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.server.track(self.connection, add=False)

    def _serve(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        request = Request(self.command, self.path, {k.lower(): v for k, v in self.headers.items()}, body)
        try:
            response = self.server.app.handle(request)
        except Exception as err:  # a bug here must show as a 500 the client retries, not a dropped socket
            response = Response.json({"reason": f"{type(err).__name__}: {err}"}, status=500)
        self.send_response(response.status)
        self.send_header("Content-Type", response.content_type)
        self.send_header("Content-Length", str(len(response.body)))
        for name, value in response.headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(response.body)

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _serve

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        pass


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True  # rebind the same port right after a stop (TIME_WAIT)

    def __init__(self, address: tuple[str, int], app: App, listening: socket.socket | None = None) -> None:
        self.app = app
        self._connections: set[socket.socket] = set()
        self._connections_lock = threading.Lock()
        super().__init__(address, _Handler, bind_and_activate=listening is None)
        if listening is not None:  # already bound and listening (handed down by a supervisor)
            self.socket.close()
            self.socket = listening
            self.server_address = listening.getsockname()

    def handle_error(self, request, client_address) -> None:
        """A client gone before its answer (a health probe that timed out while no relay ran) is no error."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)

    def track(self, conn: socket.socket, add: bool) -> None:
        with self._connections_lock:
            (self._connections.add if add else self._connections.discard)(conn)

    def close_connections(self) -> None:
        with self._connections_lock:
            conns, self._connections = list(self._connections), set()
        for conn in conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class LoopbackHTTPServer:
    """Serves `app` on host:port (port 0: an ephemeral one, kept across restarts), or on `listening`, a socket
    already bound and listening (used by the first start only)."""

    def __init__(self, app: App, host: str = "127.0.0.1", port: int = 0,
                 listening: socket.socket | None = None) -> None:
        self.app = app
        self.host = host
        self.port = port
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
            self._server = _Server((self.host, self.port), self.app, listening)
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
