"""recipes/trace_relay/sender.py: weave's batch sender posts the JSON it encoded once, and W&B receives the same
calls as from weave's own sender. Real weave client, batching and HTTP transport; W&B as the loopback stand-in."""

from __future__ import annotations

import pytest

from harness.standins.weave_http_server import API_KEY, loopback_wandb
from recipes.trace_relay.sender import post_encoded_batches

pytestmark = pytest.mark.integration

CALLS = 12


@pytest.fixture
def weave_sender():
    """weave's sender class as it was, restored after the test (the patch is per process, on the class)."""
    from weave.trace_server_bindings.remote_http_trace_server import RemoteHTTPTraceServer

    original = RemoteHTTPTraceServer.__dict__["_send_calls_complete_to_server"]
    yield RemoteHTTPTraceServer
    RemoteHTTPTraceServer._send_calls_complete_to_server = original


def traced_calls(project: str) -> tuple[list[dict], list[tuple[str, str]]]:
    """CALLS root calls with a child each, as the agent loop makes them, through a batching weave client; what the
    stand-in stored (the fields weave's sender sets) and the write requests it received."""
    from weave.trace.context import weave_client_context
    from weave.trace.weave_client import WeaveClient
    from weave.trace_server_bindings.remote_http_trace_server import RemoteHTTPTraceServer

    with loopback_wandb() as wandb:
        server = RemoteHTTPTraceServer(wandb.url + "/traces", should_batch=True)
        server.set_auth(("api", API_KEY))
        client = WeaveClient(wandb.entity, project, server, ensure_project_exists=False)
        weave_client_context.set_weave_client_global(client)  # what weave.init leaves behind
        try:
            make_calls(client)
            client.flush()
            assert len(wandb.wait_for_calls(2 * CALLS, timeout_s=30)) == 2 * CALLS
        finally:
            weave_client_context.set_weave_client_global(None)
        calls = wandb.storage.recorded_calls()
        writes = [r for r in wandb.app.requests if r[0] == "POST" and "/call" in r[1]]
    return stored_fields(calls), writes


def make_calls(client) -> None:
    """Roots with a child each, as the agent loop makes them: text, nesting, floats, None, attributes, names."""
    for i in range(CALLS):
        root = client.create_call("ScoredToolAgentLoop.run", {"i": i, "text": "½ · ünïcode \"quoted\"\n"},
                                  attributes={"step": 1, "sample_index": i}, display_name=f"prompt {i}")
        child = client.create_call("calculator.execute", {"expression": f"{i}*3", "nested": {"a": [1.5, None]}},
                                   parent=root)
        client.finish_call(child, output={"text": str(i * 3), "reward": 0.25})
        client.finish_call(root, output={"reward": 1.0, "correct": True})


def stored_fields(calls: list[dict]) -> list[dict]:
    fields = ("op_name", "display_name", "inputs", "output", "attributes", "parent_id", "exception")
    stored = [{**{k: c.get(k) for k in fields}, "op_name": str(c["op_name"]).split("/op/")[-1].split(":")[0],
               "parent": c["parent_id"] is not None, "ended": c["ended"]}
              for c in calls]
    for call in stored:
        call["parent_id"] = None  # ids differ between runs; whether it has a parent stays
        call["attributes"] = {k: v for k, v in (call["attributes"] or {}).items() if k != "weave"}
    return sorted(stored, key=repr)


def test_the_sender_posts_its_encoding_and_wandb_gets_the_same_calls(weave_sender, monkeypatch):
    weaves_own, own_writes = traced_calls("sender-weave")
    assert post_encoded_batches() and post_encoded_batches()  # idempotent
    assert weave_sender._send_calls_complete_to_server._recipe_posts_bytes

    from weave.vendor.weave_server_sdk.resources import v2_calls

    def walked(*args, **kwargs):
        raise AssertionError("the batch went through the generated client's walk again")

    monkeypatch.setattr(v2_calls.V2CallsResource, "complete", walked)
    recipes, writes = traced_calls("sender-weave")
    assert len(recipes) == 2 * CALLS and all(c["ended"] for c in recipes)
    assert recipes == weaves_own
    assert {route for _, route in writes} == {route for _, route in own_writes}
    assert all(route.endswith("/calls/complete") for _, route in writes), writes
