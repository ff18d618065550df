"""Hostile clients against a real trace relay (`python -m recipes.trace_relay serve`, under its keeper, in its own
process) on loopback. The relay holds the owner's W&B key: what a request line, a missing or wrong token, a route
weave's client never uses, a body too big or a length that lies, a slow or greedy client, or a full disk can get
out of it. W&B is the loopback stand-in; a second loopback listener stands for a host the key must never reach."""

from __future__ import annotations

import base64
import json
import os
import resource
import socket
import stat
import threading
import time
from pathlib import Path

import pytest

from harness.standins.weave_http_server import API_KEY, loopback_wandb
from recipes.trace_relay.limits import MAX_BODY_BYTES
from recipes.trace_relay.names import RELAY_HEALTH_PATH
from recipes.trace_relay.spool import Spool
from testkit.relay_process import RelayProcess

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]
PROJECT = "loopback-entity/hostile"
DELETE_PROJECT = ('mutation DeleteProject($id: String!) { deleteModel(input: {id: $id}) { success } }')


class Listener:
    """A loopback port that records every byte anyone sends it (the host a leaked key would reach)."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.received = bytearray()
        self.connections = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            conn.settimeout(2)
            try:
                while chunk := conn.recv(65536):
                    self.received += chunk
            except OSError:
                pass
            conn.close()


def basic(token: str) -> str:
    return "Basic " + base64.b64encode(f"api:{token}".encode()).decode()


def call_batch(*ids: str) -> bytes:
    return json.dumps({"batch": [{"project_id": PROJECT, "id": i, "trace_id": "t", "op_name": "op",
                                  "started_at": "2024-01-01T00:00:00Z", "ended_at": "2024-01-01T00:00:01Z",
                                  "inputs": {}, "output": 1} for i in ids]}).encode()


def request(method: str, target: str, token: str | None = None, body: bytes = b"",
            headers: dict[str, str] | None = None, length: str | None = None) -> bytes:
    lines = [f"{method} {target} HTTP/1.1", "Host: relay", "Content-Type: application/json"]
    if token is not None:
        lines.append(f"Authorization: {basic(token)}")
    lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
    if length is not None or body:
        lines.append(f"Content-Length: {length if length is not None else len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def address(url: str) -> tuple[str, int]:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    return host, int(port)


def exchange(url: str, data: bytes, timeout_s: float = 10.0) -> tuple[int | None, float]:
    """Send raw bytes; the status the relay answered (None: closed without one) and how long it took."""
    start = time.monotonic()
    with socket.create_connection(address(url), timeout=timeout_s) as sock:
        sock.sendall(data)
        answer = b""
        try:
            while b"\r\n" not in answer and (chunk := sock.recv(4096)):
                answer += chunk
        except (ConnectionResetError, TimeoutError):
            pass
    status = answer.split(b" ", 2)[1] if answer.startswith(b"HTTP/1.") else None
    return (int(status) if status else None), time.monotonic() - start


def relay_threads(relay: RelayProcess) -> int:
    return len(os.listdir(f"/proc/{relay.serving_pid}/task"))


@pytest.fixture(scope="module")
def guarded(tmp_path_factory):
    """A relay forwarding to W&B whose trace server URL has no path (W&B's cloud: https://trace.wandb.ai), and a
    listener on another port: a request line that made the relay join strings would send the key there."""
    evil = Listener()
    with loopback_wandb() as wandb:
        relay = RelayProcess(tmp_path_factory.mktemp("guarded") / "spool", "--upstream", wandb.url,
                             "--upstream-trace", wandb.url, WANDB_API_KEY=API_KEY)
        try:
            yield relay, wandb, evil
        finally:
            relay.stop()
    evil.sock.close()


def hostile_cases(token: str, evil: int) -> dict[str, tuple[bytes, set[int]]]:
    """Each hostile request and the answers it may get."""
    write = call_batch("c1")
    mutation = json.dumps({"query": DELETE_PROJECT, "variables": {"id": "x"}}).encode()
    return {
        "request line naming another host (`GET @host/x`)": (request("GET", f"@127.0.0.1:{evil}/x", token), {400}),
        "absolute URL to another host": (request("GET", f"http://127.0.0.1:{evil}/x", token), {400}),
        "`//host/x`": (request("GET", f"//127.0.0.1:{evil}/x", token), {400, 403}),
        "userinfo inside a trace path": (request("POST", f"/traces/@127.0.0.1:{evil}/obj/read", token, b"{}"), {403}),
        "dot segments out of the trace mount": (request("POST", "/traces/../../graphql", token, mutation), {403}),
        "GraphQL mutation, no token": (request("POST", "/graphql", None, mutation), {401}),
        "GraphQL mutation weave never sends, with the token": (request("POST", "/graphql", token, mutation), {403}),
        "GraphQL query with a second operation field": (request("POST", "/graphql", token, json.dumps(
            {"query": "query { viewer { username } entity(name: \"e\") { apiKeys { edges { node { id } } } } }"}
        ).encode()), {403}),
        "DELETE, no token": (request("DELETE", "/traces/calls/delete", None, b"{}"), {401}),
        "DELETE, with the token": (request("DELETE", "/traces/calls/delete", token, b"{}"), {403}),
        "calls/delete, with the token": (request("POST", "/traces/calls/delete", token, json.dumps(
            {"project_id": PROJECT, "call_ids": ["c0"]}).encode()), {403}),
        "a method HTTP does not have": (request("FOO", "/traces/server_info", token), {403, 405}),
        "trace write, no token": (request("POST", f"/traces/v2/{PROJECT}/calls/complete", None, write), {401}),
        "trace write, wrong token": (request("POST", f"/traces/v2/{PROJECT}/calls/complete", "x" * len(token),
                                             write), {401}),
        "trace write, token as a Bearer of another": (request(
            "POST", f"/traces/v2/{PROJECT}/calls/complete", None, write,
            {"Authorization": "Bearer " + token[:-1] + ("A" if token[-1] != "A" else "B")}), {401}),
        "read, no token": (request("GET", "/traces/server_info"), {401}),
        "health route with an 8 MiB body, no token": (request("GET", RELAY_HEALTH_PATH, None,
                                                                length=str(MAX_BODY_BYTES)), {401}),
        "Content-Length: -1": (request("POST", f"/traces/v2/{PROJECT}/calls/complete", token, length="-1"), {400}),
        "Content-Length: abc": (request("POST", f"/traces/v2/{PROJECT}/calls/complete", token, length="abc"), {400}),
        "Content-Length: +5": (request("POST", f"/traces/v2/{PROJECT}/calls/complete", token, length="+5"), {400}),
        "two different Content-Lengths": (request("POST", f"/traces/v2/{PROJECT}/calls/complete", token, write,
                                                  {"Content-Length": "3"}), {400}),
        "Transfer-Encoding: chunked": (request("POST", f"/traces/v2/{PROJECT}/calls/complete", token,
                                               headers={"Transfer-Encoding": "chunked"}) + b"5\r\nhello\r\n0\r\n\r\n",
                                       {411}),
    }


def test_hostile_requests_get_a_4xx_and_reach_neither_wandb_nor_another_host(guarded):
    relay, wandb, evil = guarded
    wandb.app.requests.clear()
    answers = {case: exchange(relay.url, data)[0] for case, (data, _) in hostile_cases(relay.token, evil.port).items()}
    wrong = {case: (answers[case], allowed) for case, (_, allowed) in hostile_cases(relay.token, evil.port).items()
             if answers[case] not in allowed}
    assert not wrong, wrong
    time.sleep(0.5)  # anything forwarded would have arrived
    assert (evil.connections, bytes(evil.received)) == (0, b"")
    assert wandb.app.requests == [], wandb.app.requests  # nothing was forwarded, the key went nowhere
    assert Spool(relay.spool).pending_count == 0  # nothing was kept either


def test_what_weave_needs_still_goes_through_with_the_token(guarded):
    """The same relay answers weave's own requests for a client holding the run's token."""
    relay, wandb, _ = guarded
    project_query = json.dumps({"query": "query Project($name: String!, $entityName: String!) {\n  project(name: "
                                         "$name, entityName: $entityName) {\n    name\n  }\n}",
                                "variables": {"entityName": "loopback-entity", "name": "hostile"}}).encode()
    assert exchange(relay.url, request("POST", "/graphql", relay.token, project_query))[0] == 200
    assert exchange(relay.url, request("GET", "/traces/server_info", relay.token))[0] == 200
    assert exchange(relay.url, request("POST", f"/traces/v2/{PROJECT}/calls/complete", relay.token,
                                       call_batch("kept")))[0] == 200
    assert exchange(relay.url, request("GET", RELAY_HEALTH_PATH, relay.token))[0] == 200  # the keeper's probe
    assert exchange(relay.url, request("GET", RELAY_HEALTH_PATH))[0] == 401  # with the token, as every other route


def test_a_body_over_the_limit_is_refused_before_it_is_sent(guarded):
    """413 for a Content-Length over the limit, answered while the client has sent only its headers."""
    relay, _, _ = guarded
    head = request("POST", f"/traces/v2/{PROJECT}/calls/complete", relay.token, length=str(MAX_BODY_BYTES + 1))
    status, seconds = exchange(relay.url, head, timeout_s=5)
    assert (status, seconds < 3) == (413, True), (status, seconds)


def test_refusals_are_logged_once_per_reason(guarded):
    relay, _, evil = guarded
    for _ in range(30):
        exchange(relay.url, request("POST", f"/traces/v2/{PROJECT}/calls/complete", "wrong", call_batch("w")))
        exchange(relay.url, request("GET", f"@127.0.0.1:{evil.port}/x", relay.token))
    output = relay.stop()
    lines = [line for line in output.splitlines() if "refused" in line]
    assert 2 <= len(lines) <= 20, lines  # one line per reason (and a tally at the end), not one per request
    assert relay.token not in output and API_KEY not in output


@pytest.fixture(scope="module")
def tight(tmp_path_factory):
    """A relay with short client timeouts, few connections, and a free-space floor above what the disk has."""
    relay = RelayProcess(tmp_path_factory.mktemp("tight") / "spool", "--offline", "--entity", "loopback-entity",
                         "--client-timeout", "1", "--max-connections", "8", "--min-free-mb", str(2 ** 40))
    try:
        yield relay
    finally:
        relay.stop()


def test_a_half_sent_request_is_cut_off(tight):
    for partial in (b"POST /traces/v2/e/p/calls/complete HTTP/1.1\r\nContent-Len",  # headers never finished
                    request("POST", "/traces/v2/e/p/calls/complete", tight.token, length="100") + b"{\"ba"):
        status, seconds = exchange(tight.url, partial, timeout_s=10)
        assert status in (None, 408) and seconds < 5, (partial, status, seconds)


def test_a_request_trickled_a_byte_at_a_time_is_cut_off(tight):
    """A client that keeps sending, slowly, is cut off too: a whole request has a deadline, not only each byte."""
    data = request("POST", "/traces/v2/e/p/calls/complete", tight.token, call_batch("slow"))
    start = time.monotonic()
    with socket.create_connection(address(tight.url), timeout=10) as sock:
        try:
            for byte in data:
                sock.send(bytes([byte]))
                time.sleep(0.2)
                if time.monotonic() - start > 15:
                    break
            answer = sock.recv(100)
        except OSError:
            answer = b""
    assert time.monotonic() - start < 6 and not answer.startswith(b"HTTP/1.1 200"), answer


def test_connections_beyond_the_bound_are_refused_and_threads_stay_bounded(tight):
    """40 clients connect and send nothing: the relay serves 8 (the bound) and answers the others 503 at once,
    before any idle timeout (1 s here) could have freed them; it runs a thread per served connection only."""
    idle = []
    try:
        for _ in range(40):
            idle.append(socket.create_connection(address(tight.url)))
        time.sleep(0.3)
        threads = relay_threads(tight)
        answers = []
        for sock in idle:
            sock.settimeout(0.02)
            try:
                answers.append(sock.recv(100))
            except TimeoutError:
                answers.append(None)  # being served: waiting for a request
        busy = sum(1 for answer in answers if answer and answer.startswith(b"HTTP/1.1 503"))
        assert busy >= 40 - 8 - 2, answers  # (a connection or two may still be in the kernel's accept queue)
        assert threads <= 8 + 12, threads  # the bound plus the relay's own threads, not one per connection
    finally:
        for sock in idle:
            sock.close()
    time.sleep(1.5)  # the idle ones timed out: the relay answers again
    assert exchange(tight.url, request("GET", RELAY_HEALTH_PATH, tight.token))[0] == 200


def test_a_disk_under_the_free_space_floor_takes_no_record_and_says_retry(tight):
    status, _ = exchange(tight.url, request("POST", "/traces/v2/e/p/calls/complete", tight.token, call_batch("f")))
    assert status == 503  # weave retries a 5xx; nothing was acknowledged that is not on disk
    assert Spool(tight.spool).pending_count == 0


def _small_files(limit: int):
    def limit_and_open_umask() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))  # a write past `limit` bytes fails (EFBIG)
        os.umask(0)  # the spool must be private whatever the umask

    return limit_and_open_umask


def test_a_full_disk_loses_no_acknowledged_record_and_the_spool_is_private(tmp_path):
    """Appends fail part-way (RLIMIT_FSIZE: the file may not grow past 96 KiB), as on a disk that fills up: a record
    that did not fit is refused (503, weave retries it) and rolled back, so every record acknowledged before and
    after it can still be read and sent."""
    relay = RelayProcess(tmp_path / "spool", "--offline", "--entity", "loopback-entity",
                         preexec_fn=_small_files(96 * 1024))
    acknowledged, refused = [], 0
    try:
        for i in range(60):  # big records fill the segment; small ones still fit after each failure
            ids = [f"r{i}-{n}" for n in range(40 if i % 3 == 0 else 1)]
            body = json.loads(call_batch(*ids))
            for item in body["batch"]:
                item["inputs"] = {"text": "x" * 300}
            status, _ = exchange(relay.url, request("POST", "/traces/v2/e/p/calls/complete", relay.token,
                                                    json.dumps(body).encode()))
            if status == 200:
                acknowledged += ids
            else:
                assert status == 503, status
                refused += 1
    finally:
        relay.stop()
    assert refused and acknowledged, (refused, len(acknowledged))
    kept = [item["id"] for record in Spool(tmp_path / "spool").pending() for item in json.loads(record.body)["batch"]]
    assert sorted(kept) == sorted(acknowledged), f"{len(set(acknowledged) - set(kept))} acknowledged records lost"
    root = tmp_path / "spool"
    assert stat.S_IMODE(root.stat().st_mode) == 0o700 and stat.S_IMODE((root / "segments").stat().st_mode) == 0o700
    files = [p for p in root.rglob("*") if p.is_file()]
    assert files and {p.name: oct(stat.S_IMODE(p.stat().st_mode)) for p in files if
                      stat.S_IMODE(p.stat().st_mode) != 0o600} == {}


def test_the_relay_will_not_start_open_to_anyone(tmp_path):
    """No token: no relay. Another host than loopback only when asked for by name."""
    import subprocess
    import sys

    def serve(*args: str, **env: str) -> subprocess.CompletedProcess:
        clean = {k: v for k, v in os.environ.items() if not k.startswith(("WANDB", "WF_", "GSM8K_RECIPE"))}
        return subprocess.run([sys.executable, "-m", "recipes.trace_relay", "serve", "--spool", str(tmp_path / "s"),
                               "--offline", "--entity", "e", *args], env={**clean, **env}, capture_output=True,
                              text=True, timeout=60)

    no_token = serve()
    assert no_token.returncode == 2 and "GSM8K_RECIPE_TRACE_RELAY_TOKEN" in no_token.stderr, no_token.stderr
    open_host = serve("--host", "0.0.0.0", GSM8K_RECIPE_TRACE_RELAY_TOKEN="t" * 32)
    assert open_host.returncode == 2 and "--allow-remote" in open_host.stderr, open_host.stderr
    help_text = subprocess.run([sys.executable, "-m", "recipes.trace_relay", "serve", "--help"], capture_output=True,
                               text=True, timeout=60).stdout
    assert "token" in help_text and "other nodes" in help_text


def test_spool_files_are_private_whatever_the_umask(tmp_path):
    """The spool's own files (segments, checkpoint, lock, remembered answers, rejected records) are its user's only."""
    from recipes.trace_relay.spool import Record

    old = os.umask(0)
    try:
        spool = Spool(tmp_path / "spool").acquire()
        spool.append(Record(route="/obj/create", body=b"{}"))
        spool.mark_sent(spool.pending())
        spool.write_json("viewer.json", {"viewer": {}})
        spool.close()
    finally:
        os.umask(old)
    modes = {str(p.relative_to(tmp_path)): oct(stat.S_IMODE(p.stat().st_mode)) for p in (tmp_path / "spool").rglob("*")}
    assert modes and all(mode == ("0o700" if Path(tmp_path, name).is_dir() else "0o600")
                         for name, mode in modes.items()), modes
    assert oct(stat.S_IMODE((tmp_path / "spool").stat().st_mode)) == "0o700"


SPLIT_CLIENT = """
import os, sys
from recipes.trace_relay.client import use_trace_relay
assert use_trace_relay()
import weave
client = weave.init("split")
for i in range(int(sys.argv[1])):
    client.finish_call(client.create_call("Rollout.run", {"i": i, "text": "x" * 20000}), output={"reward": 1.0})
client.flush()
os._exit(0)
"""


def test_a_weave_batch_over_the_limit_is_split_by_weave_and_nothing_is_lost(tmp_path):
    """The limit is below what weave may put in one batch (31 MiB): weave answers a 413 by sending the halves, so a
    client whose calls each fit loses none (here a 64 KiB limit and ~20 KB calls sent together)."""
    import subprocess
    import sys

    calls = 30
    with loopback_wandb() as wandb:
        relay = RelayProcess(tmp_path / "spool", "--max-body-mb", str(64 / 1024), WANDB_BASE_URL=wandb.url,
                             WANDB_API_KEY=API_KEY)
        try:
            env = {k: v for k, v in os.environ.items() if not k.startswith(("WANDB", "WF_", "WEAVE"))}
            env.update({**relay.client_env, "WANDB_ENTITY": wandb.entity, "WANDB_ERROR_REPORTING": "false",
                        "WEAVE_PRINT_CALL_LINK": "false"})
            client = subprocess.run([sys.executable, "-c", SPLIT_CLIENT, str(calls)], env=env, capture_output=True,
                                    text=True, timeout=180)
            assert client.returncode == 0, client.stderr[-3000:]
            received = wandb.wait_for_calls(calls, timeout_s=60)
        finally:
            output = relay.stop()
    assert len(received) == calls, (len(received), output[-2000:])
    assert "413" in output  # the limit did bite


class Recorder:
    """W&B as the relay's upstream, recording every request it gets (method, path, headers, body) and answering as
    W&B would: weave.init's GraphQL, server info, an empty read."""

    def __init__(self) -> None:
        from recipes.trace_relay import protocol
        from recipes.trace_relay.http import LoopbackHTTPServer, Response

        self.received: list = []
        recorder = self

        class App:
            def handle(self, req):
                recorder.received.append(req)
                if req.path.startswith(protocol.GRAPHQL_PATH):
                    return Response.json(protocol.answer_graphql(req.body, "loopback-entity", "me") or {"data": None})
                return Response.json({})

        self.http = LoopbackHTTPServer(App()).start()
        self.url = self.http.url


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    upstream = Recorder()
    relay = RelayProcess(tmp_path_factory.mktemp("recorded") / "spool", "--upstream", upstream.url,
                         "--upstream-trace", upstream.url, WANDB_API_KEY=API_KEY)
    try:
        yield relay, upstream
    finally:
        relay.stop()
        upstream.http.stop()


ALLOWED_PROJECT_QUERY = ("query Project($name: String!, $entityName: String!) {\n  project(name: $name, entityName: "
                         "$entityName) {\n    name\n  }\n}")


def test_json_with_duplicate_keys_is_refused_and_nothing_else_than_what_was_checked_is_forwarded(recorded):
    """A GraphQL body with two "query" keys (a mutation first, weave's own query last: json.loads keeps the last, a
    server may take the first), the same with the case changed, a write with two "batch" keys: refused, nothing
    forwarded or kept."""
    relay, upstream = recorded
    upstream.received.clear()
    mutation = json.dumps(DELETE_PROJECT)
    allowed = json.dumps(ALLOWED_PROJECT_QUERY)
    bodies = {
        "two query keys": f'{{"query": {mutation}, "query": {allowed}, "variables": {{}}}}',
        "query and QUERY": f'{{"QUERY": {mutation}, "query": {allowed}, "variables": {{}}}}',
        "an escaped second query": f'{{"query": {mutation}, "\\u0071uery": {allowed}}}',
    }
    answers = {case: exchange(relay.url, request("POST", "/graphql", relay.token, body.encode()))[0]
               for case, body in bodies.items()}
    batch = call_batch("dup")
    write = b'{"batch": [], ' + batch[1:]
    answers["a write with two batch keys"] = exchange(relay.url, request(
        "POST", f"/traces/v2/{PROJECT}/calls/complete", relay.token, write))[0]
    time.sleep(0.5)
    forwarded = [(r.path, r.body[:200]) for r in upstream.received]
    assert all(status in (400, 403) for status in answers.values()), answers
    assert not any(b"deleteModel" in body for _, body in forwarded), forwarded
    assert Spool(relay.spool).pending_count == 0
    # weave's own document still goes through, as W&B receives exactly what was checked
    status, _ = exchange(relay.url, request("POST", "/graphql", relay.token, json.dumps(
        {"query": ALLOWED_PROJECT_QUERY, "variables": {"name": "p", "entityName": "e"}}).encode()))
    assert status == 200
    sent = json.loads(upstream.received[-1].body)
    assert sent["query"] == ALLOWED_PROJECT_QUERY and set(sent) <= {"query", "variables", "operationName"}


def test_only_the_headers_weave_needs_are_forwarded(recorded):
    relay, upstream = recorded
    upstream.received.clear()
    hostile = {"X-HTTP-Method-Override": "DELETE", "Cookie": "session=stolen", "X-Forwarded-Host": "evil.example",
               "X-Forwarded-For": "10.0.0.1", "Origin": "http://evil.example", "X-Weave-Trace-Id": "trace-1"}
    for target, body in (("/traces/obj/read", b'{"project_id": "e/p", "object_id": "o", "digest": "d"}'),
                         ("/traces/server_info", b"")):
        method = "POST" if body else "GET"
        status, _ = exchange(relay.url, request(method, target, relay.token, body, headers=hostile))
        assert status == 200, (target, status)
    assert len(upstream.received) == 2
    for req in upstream.received:
        names = set(req.headers)
        assert not names & {"x-http-method-override", "cookie", "x-forwarded-host", "x-forwarded-for", "origin"}, names
        assert req.headers.get("x-weave-trace-id") == "trace-1"
        assert req.headers.get("authorization", "").startswith("Basic ")  # the relay's own key, not the client's
