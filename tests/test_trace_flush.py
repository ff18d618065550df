"""The per-step flush of the recipe's agent-loop worker is bounded: a slow W&B costs a step at most the flush
timeout, the flush goes on in the background, and nothing it was sending is lost. Real weave client and HTTP
transport, W&B as the loopback stand-in answering each write after 5 s."""

import asyncio
import time

import pytest

from harness.standins.weave_http_server import API_KEY, loopback_wandb
from recipes.tracing.flush import TraceFlusher

pytestmark = pytest.mark.integration


def test_a_slow_wandb_costs_a_step_at_most_the_flush_timeout():
    from verl.utils.rollout_trace import RolloutTraceConfig
    from weave.trace.context import weave_client_context
    from weave.trace.weave_client import WeaveClient
    from weave.trace_server_bindings.remote_http_trace_server import RemoteHTTPTraceServer

    with loopback_wandb() as wandb:
        wandb.app.write_delay_s = 5.0
        server = RemoteHTTPTraceServer(wandb.url + "/traces", should_batch=True)
        server.set_auth(("api", API_KEY))
        client = WeaveClient(wandb.entity, "flush-test", server, ensure_project_exists=False)
        weave_client_context.set_weave_client_global(client)  # what weave.init leaves behind
        config = RolloutTraceConfig.get_instance()
        config.backend, config.client = "weave", client  # as RolloutTraceConfig.init leaves a tracing worker
        try:
            for i in range(20):
                client.finish_call(client.create_call("Rollout.run", {"i": i}), output={"reward": 1.0})
            flusher = TraceFlusher(timeout_s=0.5)

            async def end_of_step():
                start = time.perf_counter()
                return await flusher.flush(), time.perf_counter() - start

            flushed, seconds = asyncio.run(end_of_step())
            assert not flushed and seconds < 2.0, seconds
            assert len(wandb.wait_for_calls(20, timeout_s=60)) == 20
        finally:
            RolloutTraceConfig.reset()
            weave_client_context.set_weave_client_global(None)
