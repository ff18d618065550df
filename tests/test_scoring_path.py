"""One scoring path: the recipe's agent loop (recipes/gsm8k/agent_loop.py) scores EVERY trajectory once, with the
reward file the config names and its kwargs, from what the model wrote as the response mask says; verl's own scoring
(AgentLoopWorker._compute_score) then leaves it alone, and the trace root shows the same value.

verl's real ToolAgentLoop (as the recipe's subclass), its real `_compute_score`, the real weave client on the
in-memory trace server, our calculator; only the LLM server is scripted, and verl's reward-loop worker is a
counting stand-in (to see whether verl would call it)."""

import asyncio
import contextvars
from types import SimpleNamespace

import pytest

from data_prep.gsm8k_rows import SourceRecord, build_row
from harness import agent_loop_inprocess as harness
from harness.qwen_tokenizer import load_qwen25_tokenizer
from harness.standins.scripted_llm import ScriptedLLM, tool_call
from harness.standins.weave_memory_server import install_memory_weave_client
from recipes.constants import REPO_ROOT
from recipes.gsm8k.agent_loop import REWARD_EXTRA_INFO, ScoredToolAgentLoop
from recipes.gsm8k.tool_sets import get_tool_set
from testkit import recording_reward
from tools.calculator import NAME as CALCULATOR

pytestmark = pytest.mark.integration

RECORDING_REWARD = REPO_ROOT / "tests" / "testkit" / "recording_reward.py"
QUESTION = "Tom has 70 apples and buys 2 more. How many apples does he have?"
SCRIPTS = {  # rollout -> assistant turns; the tool's answer (72) is the ground truth in every one
    0: [tool_call(CALCULATOR, expression="70+2"), "70+2 = 72.\n#### 72"],  # right, with a call
    1: ["#### 71"],  # wrong, no call
    2: [tool_call(CALCULATOR, expression="70+2"), "I am not sure."],  # only the tool said 72
}
TRACED = {0, 2}


@pytest.fixture(scope="module")
def tok():
    return load_qwen25_tokenizer()


def row(question=QUESTION, answer="72"):
    return build_row(SourceRecord(question, f"#### {answer}", "test", 0), "train", get_tool_set("calculator"))


def run_scripted(tok, config, scripts: dict, traced=frozenset(), **attr):
    """Each script as one rollout of the recipe's loop, concurrently, under verl's trace attributes."""
    from verl.utils.rollout_trace import rollout_trace_attr

    tools = harness.load_tools(config)
    playing = contextvars.ContextVar("rollout")
    llm = ScriptedLLM(tok, lambda prompt: scripts[playing.get()])

    async def one(key):
        playing.set(key)
        with rollout_trace_attr(step=1, sample_index=0, rollout_n=key, validate=False, trace=key in traced, **attr):
            return await harness.run_rollout(config, tok, llm, tools, row(), ScoredToolAgentLoop)

    async def all_of_them():
        return dict(zip(scripts, await asyncio.gather(*(one(k) for k in scripts)), strict=True))

    return asyncio.run(all_of_them())


@pytest.fixture(scope="module")
def recorded(tok):
    """The scripts under a reward file that is not the recipe's (x10 + 0.5), tool bonus 0.1, flexible, traced."""
    from verl.utils.rollout_trace import RolloutTraceConfig

    config = harness.compose_trainer_config("calculator", (
        f"reward.custom_reward_function.path={RECORDING_REWARD}",
        "reward.custom_reward_function.reward_kwargs.tool_call_bonus=0.1",
        "reward.custom_reward_function.reward_kwargs.method=flexible"))
    RolloutTraceConfig.reset()
    server, client = install_memory_weave_client("gsm8k-scoring-test")
    RolloutTraceConfig.init("gsm8k-scoring-test", "exp", "weave", token2text=True)
    recording_reward.CALLS.clear()
    outputs = run_scripted(tok, config, SCRIPTS, TRACED)
    client.flush()
    calls = list(recording_reward.CALLS)
    yield SimpleNamespace(outputs=outputs, calls=calls, roots=[c for c in server.recorded_calls()
                                                               if c["parent_id"] is None])
    RolloutTraceConfig.reset()


def test_every_trajectory_is_scored_once_by_the_configured_file_with_its_kwargs(recorded):
    assert len(recorded.calls) == len(SCRIPTS), "one reward call per trajectory, traced or not"
    for call in recorded.calls:
        assert call["kwargs"] == {"tool_call_bonus": 0.1, "method": "flexible"}
        assert call["ground_truth"] == "72"
        info = call["extra_info"]  # as verl's naive reward manager builds it
        assert info["tools_kwargs"] and "tool_rewards" in info and info["num_turns"] >= 2
    expected = {0: 10 * 1.1 + 0.5, 1: 0.5, 2: 10 * 0.1 + 0.5}  # right + bonus, wrong, bonus only
    for key, output in recorded.outputs.items():
        assert output.reward_score == pytest.approx(expected[key]), key
        assert output.extra_fields[REWARD_EXTRA_INFO]["source"] == "recording_reward"
        assert output.metrics.compute_score > 0


def test_the_reward_sees_only_what_the_model_wrote(recorded):
    texts = sorted(call["solution_str"] for call in recorded.calls)
    assert texts == sorted(["\n".join(turns) for turns in SCRIPTS.values()])
    assert not any("<tool_response>" in text or "user\n" in text for text in texts)


def test_the_trace_root_shows_the_score_the_trainer_uses(recorded):
    assert len(recorded.roots) == len(TRACED)
    for root in recorded.roots:
        output = recorded.outputs[root["attributes"]["rollout_n"]]
        assert root["output"]["reward"] == output.reward_score
        assert root["output"]["num_tool_calls"] == output.extra_fields[REWARD_EXTRA_INFO]["num_tool_calls"]


class RewardWorkerHandle:
    """Stands in for a verl RewardLoopWorker actor handle: counts what verl would send it."""

    def __init__(self):
        self.calls = 0
        self.compute_score = SimpleNamespace(remote=self._remote)

    async def _remote(self, data):
        self.calls += 1
        return {"reward_score": -1.0, "reward_extra_info": {"acc": -1.0}}


def verl_scores(output) -> int:
    """verl's own AgentLoopWorker._compute_score on one finished trajectory; how often it called a reward worker."""
    from verl.experimental.agent_loop.agent_loop import AgentLoopWorker

    worker = AgentLoopWorker.__new__(AgentLoopWorker)  # only what _compute_score reads
    worker.reward_loop_worker_handles, worker.processor, worker.mm_processor_kwargs = [RewardWorkerHandle()], None, None
    asyncio.run(worker._compute_score([output], kwargs={}))
    return worker.reward_loop_worker_handles[0].calls


def test_verl_does_not_score_a_scored_trajectory_again_and_would_score_an_unscored_one(recorded):
    for output in recorded.outputs.values():
        before = output.reward_score
        assert verl_scores(output) == 0 and output.reward_score == before
    unscored = recorded.outputs[1].model_copy(update={"reward_score": None})
    assert verl_scores(unscored) == 1 and unscored.reward_score == -1.0  # the check can fail


IPYTHON_TOOL_TURN = ("{{- '<|im_start|>user' }}", "{{- '<|im_start|>ipython' }}"), \
    ("{{- '\\n<tool_response>\\n' }}", "{{- '\\n' }}"), ("{{- '\\n</tool_response>' }}", "")


def test_tool_output_is_never_the_models_under_a_template_without_tool_tags(tok):
    """Llama 3.1 renders a tool's answer under an `ipython` header, no <tool_response> tags: a split of the decoded
    text by tags would score the tool's 72 as the model's under method=flexible. The mask split does not."""
    ipython = load_qwen25_tokenizer()
    for old, new in IPYTHON_TOOL_TURN:
        assert old in ipython.chat_template
        ipython.chat_template = ipython.chat_template.replace(old, new)
    flexible = "reward.custom_reward_function.reward_kwargs.method=flexible"
    output = run_scripted(ipython, harness.compose_trainer_config("calculator", (flexible,)), {0: SCRIPTS[2]})[0]
    whole = ipython.decode(output.response_ids, skip_special_tokens=True)
    assert "ipython\n72" in whole and "<tool_response>" not in whole  # the template took effect
    # the last number the model wrote is the call's 2: flexible reads that, never the tool's 72
    assert output.reward_score == 0.0 and output.extra_fields[REWARD_EXTRA_INFO]["pred"] == "2"
