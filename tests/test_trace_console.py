"""What tracing prints in an agent-loop worker: no `weave: 🍩 <url>` line per traced call. The real weave client
on the loopback W&B stand-in, initialised the way each worker does it (guard_trace_init, then verl's
RolloutTraceConfig.init), with WEAVE_PRINT_CALL_LINK unset as in a user's shell (tests/conftest.py sets it
for the rest of the suite)."""

import asyncio
import logging

import pytest

from harness.standins.weave_http_server import loopback_wandb

pytestmark = pytest.mark.integration


@pytest.fixture
def fresh_trace_config():
    from verl.utils.rollout_trace import RolloutTraceConfig
    from weave.trace.context import weave_client_context

    RolloutTraceConfig.reset()
    weave_client_context.set_weave_client_global(None)  # weave.init reuses a global client left by another test
    yield RolloutTraceConfig
    RolloutTraceConfig.reset()
    weave_client_context.set_weave_client_global(None)


def test_worker_tracing_prints_no_call_links(fresh_trace_config, monkeypatch, caplog):
    from verl.utils.rollout_trace import rollout_trace_attr, rollout_trace_op

    from recipes.tracing.guard import guard_trace_init

    class Loop:
        @rollout_trace_op
        async def run(self, question):
            return {"answer": question}

    async def trajectories():
        for index in range(3):
            with rollout_trace_attr(step=1, sample_index=index, rollout_n=0, validate=False):
                await Loop().run(f"question {index}")

    caplog.set_level(logging.INFO, logger="weave")  # weave logs its links at INFO on the `weave` logger
    with loopback_wandb() as wandb:
        for name, value in wandb.env.items():
            monkeypatch.setenv(name, value)
        monkeypatch.delenv("WEAVE_PRINT_CALL_LINK")
        guard_trace_init()  # as TracedAgentLoopWorker.__init__ does before verl's AgentLoopWorker.__init__
        fresh_trace_config.init("gsm8k-console-test", "exp", "weave")
        asyncio.run(trajectories())
        fresh_trace_config.get_client().flush()
        assert len(wandb.storage.complete_call_ids()) == 3  # traced and delivered: the quiet is not tracing off
    weave_lines = [r.getMessage() for r in caplog.records if r.name.startswith("weave")]
    assert any("Logged in as" in line for line in weave_lines)  # weave's own log lines do reach this test
    links = [line for line in weave_lines if "🍩" in line or "/r/call/" in line]
    assert links == [], f"{len(links)} per-call links printed, e.g. {links[:1]}"


def test_the_launch_says_where_the_traces_are(default_dry_run):
    """The one line the launcher prints (stderr, `[traces] ...`; tests/test_dry_run_network.py sees it printed once)."""
    from recipes.launch.decision import traces_line

    line = traces_line(default_dry_run.launch)
    assert line.startswith("Weave traces: ") and "/gsm8k_tool_grpo/weave" in line
    assert "experiment_name=gsm8k_calculator_Qwen2.5-3B-Instruct_8xh100" in line
    assert "this node's trace relay" in line  # TRACE_RELAY=auto, the default


@pytest.mark.parametrize(("base_url", "expected"), [
    ("https://api.wandb.ai", "https://wandb.ai/team/gsm8k_tool_grpo/weave"),
    ("https://wandb.example.com", "https://wandb.example.com/team/gsm8k_tool_grpo/weave"),  # self-hosted
])
def test_the_link_is_the_projects_weave_page(monkeypatch, base_url, expected):
    from recipes.tracing.location import weave_project_url, where_traces_go

    monkeypatch.setenv("WANDB_BASE_URL", base_url)
    monkeypatch.setenv("WANDB_ENTITY", "team")
    url = weave_project_url("gsm8k_tool_grpo")
    assert url == expected
    offline = where_traces_go(url, "exp", "offline", "/runs/exp/trace_spool")
    assert "`gsm8k-upload-traces --spool /runs/exp/trace_spool`" in offline and expected in offline
