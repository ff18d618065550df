"""The trajectory is the unit of failure: what raises while one trajectory runs ends that trajectory, scored 0 with
its reason, counted in the step's metrics and named on the console; the step goes on.

verl's real AgentLoopWorker.generate_sequences (the recipe's TracedAgentLoopWorker, in this process, no Ray) runs the
recipe's agent loop on a step's chunk of rows with verl's own post-processing and batching; the manager's metrics
are verl's, with the recipe's counts. Only the LLM server is a script (harness.standins.scripted_llm), and the
faults are real ways a part fails (tests/testkit/faulty_parts.py), through verl's own code paths. Before, each of
them failed the whole step (verl gathers trajectories without return_exceptions).
"""

from __future__ import annotations

import asyncio
import logging
import uuid

import numpy as np
import pytest

from data_prep.gsm8k_rows import SourceRecord, build_row
from harness import agent_loop_inprocess as harness
from harness.qwen_tokenizer import build_tiny_qwen2_model_dir, default_cache_dir, load_qwen25_tokenizer
from harness.standins.scripted_llm import ScriptedLLM, tool_call
from recipes.gsm8k.agent_loop import ScoredToolAgentLoop
from recipes.gsm8k.failures import ERROR_REASON, TRAJECTORY_ERRORS
from recipes.gsm8k.tool_sets import get_tool_set
from recipes.gsm8k.trajectory import mask_runs
from testkit.faulty_parts import SERVER_ERROR, FailingRequestLLM
from tools.calculator import NAME as CALCULATOR

pytestmark = pytest.mark.integration  # the calculator's work runs in processes

QUESTION = "Tom has 70 apples and buys 2 more. How many apples does he have?"
CALL = tool_call(CALCULATOR, expression="70+2")


@pytest.fixture(scope="module")
def tok():
    return load_qwen25_tokenizer()


def rollout_runs(tok, output) -> list[tuple[int, str]]:
    return [(int(by_model), tok.decode(output.response_ids[span.start:span.stop]))
            for by_model, span in mask_runs(output.response_mask)]


# ---- the root cause: model text made valid before verl answers it or tokenizes it -------------------------------

SURROGATES = {  # what the model writes -> what the tool turn says
    "a lone surrogate as the name": ('{"name": "\\ud800", "arguments": {}}', "Unknown function '\ufffd'"),
    "a pair split in the name": ('{"name": "calc\\ud83d", "arguments": {"x": "\\ude00"}}',
                                 "Unknown function 'calc\ufffd'"),
    "a lone surrogate in the expression": ('{"name": "calculator", "arguments": {"expression": "1+\\ud800"}}',
                                           "Error: cannot parse '1+\ufffd'"),
    "a surrogate as an argument's name": ('{"name": "calculator", "arguments": {"\\udfff": "1"}}',
                                          "missing argument"),
}


@pytest.mark.parametrize("parser", ["hermes_with_feedback", "hermes"])
@pytest.mark.parametrize("case", sorted(SURROGATES))
def test_a_surrogate_escape_in_a_call_is_answered_and_the_model_goes_on(tok, parser, case):
    """`{"name": "\\ud800", ...}` passed the reader; verl answered `Unknown function '\\ud800'` and tokenizing that
    answer raised TypeError out of the agent loop (and so out of the step), with either parser."""
    body, answer = SURROGATES[case]
    config = harness.compose_trainer_config("both", (f"actor_rollout_ref.rollout.multi_turn.format={parser}",))
    row = build_row(SourceRecord(QUESTION, "#### 72", "test", 0), "train", get_tool_set("both"))
    server = ScriptedLLM(tok, lambda _: [f"<tool_call>\n{body}\n</tool_call>", "#### 72"])
    output = asyncio.run(harness.run_rollout(config, tok, server, harness.load_tools(config), row,
                                             ScoredToolAgentLoop))
    runs = rollout_runs(tok, output)
    assert [mask for mask, _ in runs] == [1, 0, 1] and answer in runs[1][1], runs
    extra = output.extra_fields["reward_extra_info"]
    assert output.reward_score == 1.0 and extra[TRAJECTORY_ERRORS] == 0 and extra[ERROR_REASON] == ""


# ---- whatever still raises: one trajectory ends, the step goes on -----------------------------------------------

ROWS = 4  # one step's chunk for one worker: the first row's trajectory meets the fault, the others answer


def faulty_tools_yaml(tmp_path, tool_class: str) -> str:
    path = tmp_path / "faulty_tools.yaml"
    path.write_text(f"tools:\n  - class_name: {tool_class}\n    config:\n      type: native\n")
    return str(path)


def step_chunk(tool_set: str):
    """verl's batch for one worker: ROWS prompts (the first is Variant 0), a uid each, the trainer's meta info."""
    from verl.protocol import DataProto

    samples = []
    for i in range(ROWS):
        row = build_row(SourceRecord(f"{QUESTION} Variant {i}.", "#### 72", "t", i), "train", get_tool_set(tool_set))
        kwargs = harness.row_kwargs({**row, "prompt": np.array(row["prompt"], dtype=object)})
        samples.append({**kwargs, "uid": str(uuid.uuid4())})
    columns = {key: np.array([s[key] for s in samples], dtype=object) for key in samples[0]}
    return DataProto(non_tensor_batch=columns, meta_info={"global_steps": 1, "validate": False})


def run_worker_step(tok, overrides: tuple[str, ...], server, tool_set: str = "calculator"):
    """One generate_sequences of the recipe's worker (verl's AgentLoopWorker), then the manager's step metrics."""
    from verl.utils.rollout_trace import RolloutTraceConfig

    from recipes.gsm8k.worker import TracedAgentLoopManager, TracedAgentLoopWorker

    model = build_tiny_qwen2_model_dir(default_cache_dir() / "tiny-qwen2")
    config = harness.compose_trainer_config(tool_set, ("actor_rollout_ref.rollout.trace.backend=null", *overrides),
                                            model_path=str(model))
    RolloutTraceConfig.reset()
    try:
        async def step():
            worker = TracedAgentLoopWorker(config, server, None, None)
            return await worker.generate_sequences(step_chunk(tool_set))

        output = asyncio.run(step())
    finally:
        RolloutTraceConfig.reset()
    manager = object.__new__(TracedAgentLoopManager)  # its metrics read only their arguments
    timing = manager._performance_metrics([output.meta_info["metrics"]], output)
    return output, timing


def script(first: list[str]):
    return lambda prompt: first if "Variant 0." in prompt else ["70+2 = 72.\n#### 72"]


FAULTS = {  # name -> (tool class in a YAML or None, the first row's script, its reason, its model turns kept)
    "a tool's release raises": ("testkit.faulty_parts.ReleaseRaisingCalculator", [CALL, "#### 72"],
                                "RuntimeError: could not release calculator instance", 1),
    "a tool answers with an image": ("testkit.faulty_parts.ImageAnsweringCalculator", [CALL, "#### 72"],
                                     "ValueError: Multimedia data can only be processed by `processor`", 1),
    "the server fails a request": (None, [CALL, SERVER_ERROR],
                                   "ConnectionError: the rollout server answered 500 Internal Server Error", 1),
    "the server fails the first request": (None, [SERVER_ERROR], "ConnectionError: the rollout server answered", 0),
}


@pytest.mark.parametrize("fault", list(FAULTS))
def test_what_raises_in_one_trajectory_ends_it_and_the_step_goes_on(tok, tmp_path, caplog, fault):
    tool_class, first, reason, model_turns = FAULTS[fault]
    overrides = (f"actor_rollout_ref.rollout.multi_turn.tool_config_path={faulty_tools_yaml(tmp_path, tool_class)}",
                 ) if tool_class else ()
    with caplog.at_level(logging.WARNING):
        output, timing = run_worker_step(tok, overrides, FailingRequestLLM(tok, script(first)))

    scores = output.batch["rm_scores"].sum(dim=1).tolist()
    errors, reasons = output.non_tensor_batch[TRAJECTORY_ERRORS], output.non_tensor_batch[ERROR_REASON]
    assert len(output) == ROWS and scores == [0.0] + [1.0] * (ROWS - 1), scores
    assert errors.tolist() == [1] + [0] * (ROWS - 1) and reasons[0].startswith(reason), reasons
    assert list(reasons[1:]) == [""] * (ROWS - 1)
    # the ended row is a row verl batches: its ids where its attention mask says, its mask within them
    attention, mask = output.batch["attention_mask"][0], output.batch["response_mask"][0]
    prompt_width = output.batch["prompts"].shape[1]
    assert int(attention[:prompt_width].sum()) > 20 and int(attention[prompt_width:].sum()) >= 1
    assert bool((mask <= attention[prompt_width:]).all())
    # what the model wrote before the fault is kept, trained on with reward 0; nothing after it
    response = tok.decode(output.batch["responses"][0][mask.bool()])
    assert (CALL in response) == bool(model_turns) and "#### 72" not in response, response
    assert timing["agent_loop/trajectory_errors/sum"] == 1.0
    step_line = [r.getMessage() for r in caplog.records if "of this step ended in an error" in r.getMessage()]
    assert step_line == [f"1 of {ROWS} trajectories of this step ended in an error and score 0: {reasons[0]} (x1)"]


def test_a_step_whose_every_trajectory_ended_in_an_error_fails_with_the_reasons(tok):
    """Every trajectory failing is the setup's fault (here: a server that fails every request): training on zeros
    alone would hide it."""
    with pytest.raises(RuntimeError, match=r"every trajectory of this step \(4\) ended in an error.*ConnectionError"):
        run_worker_step(tok, (), FailingRequestLLM(tok, lambda _: [SERVER_ERROR]))


def test_a_reward_function_that_raises_still_ends_the_run(tok, tmp_path):
    """The reward is never silently replaced: a data_source no dataset declares is the setup's error."""
    from recipes.gsm8k.score import RewardFunctionError

    with pytest.raises(RewardFunctionError, match="the reward function raised ValueError"):
        run_worker_step(tok, ("reward.custom_reward_function.reward_kwargs.method=neither",),
                        ScriptedLLM(tok, script(["#### 72"])))


def test_what_raises_around_the_agent_loop_ends_that_trajectory_too(tok, monkeypatch):
    """verl's trace wrapper of the loop's `run` opens the trajectory's root call before the loop runs: a weave
    client that raises there (here, for the first row's root only) ended the step; now that trajectory is the
    prompt alone, nobody trains on it, scored 0."""
    from verl.utils import rollout_trace

    from harness.standins.weave_memory_server import install_memory_weave_client

    _, client = install_memory_weave_client("failures-test")
    original = client.create_call

    def create_call(op, inputs, *args, **kwargs):
        if str(op).endswith("AgentLoop.run") and "Variant 0." in str(inputs):
            raise OSError("weave could not open the call")
        return original(op, inputs, *args, **kwargs)

    monkeypatch.setattr(client, "create_call", create_call)
    monkeypatch.setattr(rollout_trace.RolloutTraceConfig, "get_client", classmethod(lambda cls: client))
    monkeypatch.setattr(rollout_trace.RolloutTraceConfig, "get_backend", classmethod(lambda cls: "weave"))
    every_row_traced = ("actor_rollout_ref.rollout.trace.max_samples_per_step_per_worker=null",)
    output, timing = run_worker_step(tok, every_row_traced, ScriptedLLM(tok, script([CALL, "#### 72"])))
    assert output.non_tensor_batch[ERROR_REASON][0] == "OSError: weave could not open the call"
    assert output.batch["rm_scores"].sum(dim=1).tolist() == [0.0, 1.0, 1.0, 1.0]
    assert int(output.batch["response_mask"][0].sum()) == 0  # the prompt alone: nothing to train on
    assert timing["agent_loop/trajectory_errors/sum"] == 1.0
