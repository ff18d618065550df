"""The trace relay on its own: its spool keeps what it acknowledged, weave.init works through it while W&B is
down, what it sends matches what W&B stores (digests included), and what W&B refuses is kept, not lost.
W&B is the loopback stand-in; the weave client runs in its own process, as in an agent-loop worker."""

import json
import os
import subprocess
import sys
import time

import pytest

from harness.standins.weave_http_server import API_KEY, loopback_wandb
from recipes.trace_relay.client import use_trace_relay
from recipes.trace_relay.names import TRACE_RELAY_ENV, TRACE_RELAY_TOKEN_ENV
from recipes.trace_relay.relay import TraceRelay
from recipes.trace_relay.spool import Record, Spool, SpoolBusy
from recipes.trace_relay.upstream import Upstream
from testkit.paths import recipe_pythonpath

pytestmark = pytest.mark.integration

TOKEN = "relay-test-token-" + "t" * 24  # the launch's secret, as the relay and its clients get it
CLIENT = """
import os, sys
from recipes.trace_relay.client import use_trace_relay
use_trace_relay()  # as the recipe's agent-loop worker does
import weave
client = weave.init("relay-test")
for i in range(int(sys.argv[1])):
    call = client.create_call(op="Rollout.run", inputs={"i": i})
    client.finish_call(call, output={"reward": i % 2})
dataset = weave.Dataset(name="prompts", rows=[{"q": "1+1"}, {"q": "2+2"}])  # an object holding a ref (its table)
weave.publish(dataset)
call = client.create_call(op="Eval.run", inputs={"dataset": dataset})
client.finish_call(call, output={"accuracy": 1.0})
client.flush()
os._exit(0)  # an actor torn down: no atexit
"""


def run_client(repo_root, relay_url: str, calls: int) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WANDB", "WF_"))}
    env.update({TRACE_RELAY_ENV: relay_url, TRACE_RELAY_TOKEN_ENV: TOKEN, "WANDB_ENTITY": "loopback-entity",
                "PYTHONPATH": recipe_pythonpath(repo_root),
                "WEAVE_PRINT_CALL_LINK": "false"})
    return subprocess.run([sys.executable, "-c", CLIENT, str(calls)], env=env, capture_output=True, text=True,
                          timeout=180, cwd=repo_root)


def wait_until(predicate, timeout_s: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not predicate() and time.monotonic() < deadline:
        time.sleep(0.1)
    return predicate()


def test_spool_keeps_what_it_acknowledged(tmp_path):
    spool = Spool(tmp_path, segment_bytes=300).acquire()
    with pytest.raises(SpoolBusy, match="in use by pid"):
        Spool(tmp_path).acquire()  # one sender per spool
    for i in range(5):
        spool.append(Record(route="/obj/create", body=json.dumps({"i": i}).encode(), project_id="e/p"))
    assert len(list((tmp_path / "segments").glob("*.spool"))) > 1  # rotated
    spool.mark_sent(spool.pending(limit=2))
    spool.close()
    with open(sorted((tmp_path / "segments").glob("*.spool"))[-1], "ab") as handle:
        handle.write(b'{"route": "/obj/create", "length": 50}\n{"torn')  # a crash mid-append, never answered

    reopened = Spool(tmp_path).acquire()  # e.g. the relay restarted, or the spool copied to another machine
    assert (reopened.sent_count, reopened.pending_count) == (2, 3)
    reopened.append(Record(route="/obj/create", body=b'{"i": 5}'))  # after the last whole record, not the torn one
    assert [json.loads(r.body)["i"] for r in reopened.pending()] == [2, 3, 4, 5]
    reopened.mark_sent(reopened.pending())
    assert reopened.pending_count == 0 and len(list((tmp_path / "segments").glob("*.spool"))) == 1


def test_tracing_through_the_relay_while_wandb_is_down_at_init(repo_root, tmp_path):
    """The worker starts during an outage: the relay answers weave.init, keeps the traces, sends them when W&B
    is back. An object holding a ref gets a different digest on W&B (internal refs): later references follow."""
    with loopback_wandb() as wandb:
        wandb.stop()
        relay = TraceRelay(tmp_path / "spool", Upstream(wandb.url, wandb.url + "/traces", API_KEY),
                           token=TOKEN, max_retry_interval_s=1).start()
        try:
            client = run_client(repo_root, relay.url, calls=40)
            assert client.returncode == 0, client.stderr
            # weave.init's "View Weave data at <url>" would name the relay's port, gone after the run
            assert "View Weave data" not in client.stdout + client.stderr, client.stderr
            assert relay.spool.pending_count > 0 and not wandb.storage.starts
            wandb.start()
            assert wait_until(lambda: relay.spool.pending_count == 0)
        finally:
            summary = relay.stop(drain_timeout_s=30)
        assert (summary.pending, summary.rejected) == (0, 0)
        assert len(wandb.storage.complete_call_ids()) == 41
        assert not wandb.app.digest_mismatches
        eval_call = next(c for c in wandb.storage.recorded_calls() if "Eval.run" in c["op_name"])
        name, digest = eval_call["inputs"]["dataset"].rsplit("/", 1)[-1].split(":")
        assert ("loopback-entity/relay-test", name, digest) in wandb.storage.object_versions
        assert json.loads((tmp_path / "spool" / "digests.json").read_text())  # the relay's guess was corrected


def test_what_wandb_refuses_is_kept_and_the_upload_says_so(tmp_path, monkeypatch, capsys):
    from recipes.trace_relay.__main__ import main

    batch = {"batch": [{"project_id": "loopback-entity/p", "id": "c1", "trace_id": "t1", "op_name": "op",
                        "started_at": "2024-01-01T00:00:00Z", "ended_at": "2024-01-01T00:00:01Z",
                        "attributes": {}, "inputs": {}, "output": None, "summary": {}}]}
    spool = Spool(tmp_path)
    for _ in range(2):
        spool.append(Record(route="/v2/loopback-entity/p/calls/complete", body=json.dumps(batch).encode(),
                            project_id="loopback-entity/p"))
    spool.close()
    monkeypatch.setenv("WANDB_API_KEY", API_KEY)
    with loopback_wandb() as wandb:
        upload = ["upload", "--spool", str(tmp_path), "--upstream", wandb.url, "--timeout", "5"]
        wandb.app.refuse_writes_with = 401  # a wrong key: nothing moves, nothing is dropped
        assert main(upload) == 1
        assert "0 trace records" in (out := capsys.readouterr().out) and "2 pending" in out and "refused" in out
        wandb.app.refuse_writes_with = 400  # W&B will never take these: set aside, visibly
        assert main(upload) == 1
        assert "0 pending, 2 rejected" in capsys.readouterr().out
    assert Spool(tmp_path).pending_count == 0 and (tmp_path / "rejected.spool").stat().st_size > 0


def test_a_worker_that_does_not_reach_the_relay_traces_straight_to_wandb(tmp_path, monkeypatch, caplog):
    """Another node of a multi-node run (the URL is the driver node's loopback), or something else on the port:
    the worker keeps its W&B settings instead of sending its traces nowhere."""
    import socket

    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        free_port = probe.getsockname()[1]
    from weave.trace import init_message

    for name in ("WF_TRACE_SERVER_URL", "WANDB_API_KEY", "WEAVE_USE_SERVER_CACHE", "WANDB_ERROR_REPORTING"):
        monkeypatch.setenv(name, "unchanged")  # use_trace_relay sets these: restored after the test
    monkeypatch.setenv("WEAVE_RETRY_MAX_ATTEMPTS", "recorded")  # set too, when unset: as it was after the test
    monkeypatch.delenv("WEAVE_RETRY_MAX_ATTEMPTS")
    monkeypatch.setattr(init_message, "_print_version_check", init_message._print_version_check)
    monkeypatch.setattr(init_message, "print_init_message", init_message.print_init_message)
    monkeypatch.setenv("WANDB_BASE_URL", "https://wandb.example")
    monkeypatch.setenv(TRACE_RELAY_TOKEN_ENV, TOKEN)
    with loopback_wandb() as not_a_relay:
        for url in (f"http://127.0.0.1:{free_port}", not_a_relay.url):
            monkeypatch.setenv(TRACE_RELAY_ENV, url)
            assert use_trace_relay() is None
            assert os.environ["WANDB_BASE_URL"] == "https://wandb.example"
            assert f"Trace relay {url} does not answer from this process's node" in caplog.text
    relay = TraceRelay(tmp_path / "spool", None, token=TOKEN, entity="loopback-entity").start()
    try:
        monkeypatch.setenv(TRACE_RELAY_ENV, relay.url)
        monkeypatch.delenv(TRACE_RELAY_TOKEN_ENV)  # a relay without the run's token to present: not used
        assert use_trace_relay() is None and "came without the run's token" in caplog.text
        monkeypatch.setenv(TRACE_RELAY_TOKEN_ENV, TOKEN)
        assert use_trace_relay() == relay.url and os.environ["WANDB_BASE_URL"] == relay.url
        assert os.environ["WANDB_API_KEY"] == TOKEN  # what weave presents to the relay: never the W&B key
    finally:
        relay.stop(drain_timeout_s=1)


def test_a_repeated_call_write_is_answered_but_kept_once(tmp_path):
    """A client that timed out while the relay was down sends its batch again, and the next relay gets both
    copies from the socket's backlog: the calls are kept (and sent to W&B) once."""
    import httpx

    def batch(*ids: str) -> dict:
        return {"batch": [{"project_id": "e/p", "id": i, "trace_id": "t", "op_name": "op", "started_at":
                           "2024-01-01T00:00:00Z", "ended_at": "2024-01-01T00:00:01Z", "inputs": {}, "output": 1}
                          for i in ids]}

    relay = TraceRelay(tmp_path / "spool", None, token=TOKEN, entity="e").start()
    try:
        url = relay.url + "/traces/v2/e/p/calls/complete"
        answers = [httpx.post(url, json=body, auth=("api", TOKEN))
                   for body in (batch("a", "b"), batch("a", "b"), batch("b", "c"))]
        start = {"start": {"project_id": "e/p", "id": "d", "trace_id": "t", "op_name": "op",
                           "started_at": "2024-01-01T00:00:00Z", "inputs": {}}}
        answers += [httpx.post(relay.url + "/traces/v2/e/p/call/start", json=start, auth=("api", TOKEN))
                    for _ in range(2)]
        kept = [json.loads(r.body) for r in relay.spool.pending()]
    finally:
        relay.stop(drain_timeout_s=1)
    assert [a.status_code for a in answers] == [200] * 5
    kept_ids = [[c["id"] for c in r["batch"]] if "batch" in r else r["start"]["id"] for r in kept]
    assert kept_ids == [["a", "b"], ["c"], "d"]


def test_what_wandb_receives_weighs_what_the_client_sent_and_the_relay_counts_it(tmp_path):
    """Records the relay kept while W&B was down go as one merged request: re-encoded as weave encodes (compact,
    UTF-8; json.dumps' defaults weighed ~6% more, escaping every `·`), and counted as sent once W&B took them."""
    import httpx
    from pydantic_core import to_json

    def body(i: int) -> bytes:
        item = {"project_id": "loopback-entity/p", "id": f"c{i}", "trace_id": f"t{i}", "op_name": "op",
                "display_name": f"train step 1 · prompt {i} · rollout 0", "started_at": "2024-01-01T00:00:00Z",
                "ended_at": "2024-01-01T00:00:01Z", "attributes": {"step": 1}, "inputs": {"q": "48 ÷ 2 = ?"},
                "output": {"messages": [{"role": "assistant", "content": "48 / 2 = 24 — so 24."}]}, "summary": {}}
        return to_json({"batch": [item]})  # what weave's sender posts (remote_http_trace_server.py)

    with loopback_wandb() as wandb:
        wandb.stop()
        relay = TraceRelay(tmp_path / "spool", Upstream(wandb.url, wandb.url + "/traces", API_KEY),
                           token=TOKEN, max_retry_interval_s=1).start()
        try:
            posted = [body(i) for i in range(3)]
            for content in posted:
                answer = httpx.post(relay.url + "/traces/v2/loopback-entity/p/calls/complete", content=content,
                                    headers={"content-type": "application/json"}, auth=("api", TOKEN))
                assert answer.status_code == 200
            # W&B comes back only after an attempt failed after the last post: the forwarder's next attempt begins
            # with all three pending. An attempt that began before the last post (its group built then) and reached
            # W&B once it was back would send that group alone (seen once in a loaded CI run: two requests)
            posted_at = time.monotonic()
            assert wait_until(lambda: relay._failed_at > posted_at)
            wandb.start()
            assert wait_until(lambda: relay.spool.pending_count == 0)
        finally:
            summary = relay.stop(drain_timeout_s=30)
        received = dict(wandb.app.write_bytes)
    assert wandb.app.request_count("/v2/loopback-entity/p/calls/complete") == 1  # merged
    assert received["calls/complete"] <= sum(len(c) for c in posted) * 1.001, (received, sum(map(len, posted)))
    assert summary.sent_bytes == sum(received.values()) and "MB" in summary.line(tmp_path)


def test_answers_remembered_at_once_by_many_workers_do_not_collide(tmp_path):
    """Every agent-loop worker's weave.init passes through the relay at the same moment; each W&B answer it
    remembers (viewer.json, server_info.json) is written whole, none fails the request that brought it."""
    import threading

    spool, errors = Spool(tmp_path), []

    def remember(worker: int) -> None:
        try:
            for i in range(200):
                spool.write_json("viewer.json", {"viewer": {"username": f"u{worker}", "i": i}})
        except OSError as err:
            errors.append(err)

    threads = [threading.Thread(target=remember, args=(w,)) for w in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == [] and spool.read_json("viewer.json")["viewer"]["i"] == 199
    assert not list(tmp_path.glob("*.tmp"))


def test_a_relay_started_with_sigterm_blocked_still_stops_on_sigterm(tmp_path):
    """A Ray node kept through a preemption blocks SIGTERM for all it starts (recipes/launch/ray_nodes.py `hold`),
    the node's relay keeper and relay included: the relay's stop is still a SIGTERM, answered at once, not after the
    keeper's drain timeout."""
    import signal

    from testkit.relay_process import RelayProcess

    relay = RelayProcess(tmp_path / "spool", "--offline", "--entity", "e",
                         preexec_fn=lambda: signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM}))
    relay.process.send_signal(signal.SIGTERM)
    try:
        out = relay.process.communicate(timeout=30)[0]
    except subprocess.TimeoutExpired:
        relay.process.kill()
        pytest.fail("a relay started with SIGTERM blocked did not stop on SIGTERM within 30 s")
    assert relay.process.returncode == 0, out
    assert "trace relay stopped" in out, out


def test_a_relay_imports_weave_at_the_first_write_it_digests_not_at_its_start(repo_root):
    """weave is most of a relay's start-up; a relay no client writes to never needs it."""
    check = ("import sys; import recipes.trace_relay.__main__, recipes.trace_relay.relay; "
             "print('weave' in sys.modules); from recipes.trace_relay.protocol import answer_write; "
             "answer_write('/file/create', 'multipart/form-data; boundary=b', "
             "b'--b\\r\\nContent-Disposition: form-data; name=\"file\"\\r\\n\\r\\ncode\\r\\n--b--\\r\\n'); "
             "print('weave' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": recipe_pythonpath(repo_root)})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["False", "True"]
