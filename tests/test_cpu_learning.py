"""The CPU learning check's pieces (scripts/harness/learning): the synthetic tasks (one step, and chains of 1-3 steps)
go through the recipe's data prep, and an SFT transcript is, token for token, what verl's real ToolAgentLoop holds
after the same conversation, for every number of calls of one-, two- and three-step problems (the recipe's config,
tool and parser; only the LLM server is scripted, harness.standins.scripted_llm)."""

import asyncio
import json

import pytest

from data_prep.gsm8k import main as data_prep_main
from data_prep.gsm8k_rows import SourceRecord, build_row
from harness import agent_loop_inprocess as harness
from harness.learning import task
from harness.learning.small_model import build_from_rows
from harness.learning.transcripts import Renderer, depth_of, expressions_of, scripted_turns
from harness.standins.scripted_llm import ScriptedLLM
from recipes.constants import REPO_ROOT
from recipes.gsm8k.tool_sets import get_tool_set
from testkit.model_folder import assert_carries_transformers_version

pytestmark = pytest.mark.integration  # the calculator evaluates in a work process


def rows_of(problems, split="train"):
    tool_set = get_tool_set("calculator")
    return [build_row(SourceRecord(p.record()["question"], p.record()["answer"], "synthetic", i), split, tool_set)
            for i, p in enumerate(problems)]


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    from transformers import AutoTokenizer

    splits = task.make_splits(train_size=60, test_size=6, seed=3)
    folder = tmp_path_factory.mktemp("model") / "m"
    build_from_rows(rows_of(splits["train"]), folder, seed=0)
    return AutoTokenizer.from_pretrained(str(folder)), rows_of(splits["test"], "test")


@pytest.fixture(scope="module")
def chain(tmp_path_factory):
    """A tokenizer built on chain-task rows, and test rows of depths 1, 2, 3, 1, 2, 3."""
    from transformers import AutoTokenizer

    splits = task.make_splits(train_size=90, test_size=6, seed=5, task="chain")
    folder = tmp_path_factory.mktemp("chain_model") / "m"
    build_from_rows(rows_of(splits["train"]), folder, seed=0)
    return AutoTokenizer.from_pretrained(str(folder)), rows_of(splits["test"], "test")


def test_task_is_deterministic_disjoint_and_goes_through_data_prep(tmp_path):
    a, b = task.make_splits(200, 50, seed=7), task.make_splits(200, 50, seed=7)
    assert a == b and a != task.make_splits(200, 50, seed=8)
    assert not {p.question for p in a["train"]} & {p.question for p in a["test"]}
    for problem in a["test"]:
        [(expression, value)] = problem.steps
        assert eval(expression) == value == problem.answer  # noqa: S307  test-only check of our own strings
    assert task.main(["--out_dir", str(tmp_path / "raw"), "--train_size", "20", "--test_size", "5"]) == 0
    assert data_prep_main(["--input_dir", str(tmp_path / "raw"), "--local_save_dir", str(tmp_path / "data")]) == 0
    import pyarrow.parquet as pq

    rows = pq.read_table(tmp_path / "data" / "test.parquet").to_pylist()
    first = json.loads((tmp_path / "raw" / "test.jsonl").read_text().splitlines()[0])
    assert len(rows) == 5 and rows[0]["reward_model"]["ground_truth"] == first["answer"].rsplit("#### ", 1)[1]


def test_tokenizer_digits_markers_and_short_prompt(small):
    tok, rows = small
    assert [tok.decode([i]) for i in tok.encode("9081", add_special_tokens=False)] == ["9", "0", "8", "1"]
    for marker in ("<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"):
        assert len(tok.encode(marker, add_special_tokens=False)) == 1, marker
    # the reward reads tool calls and responses from text decoded with special tokens skipped: they must stay
    text = '<tool_call>\n{"x": 1}\n</tool_call><|im_end|>'
    assert tok.decode(tok.encode(text, add_special_tokens=False), skip_special_tokens=True) == text[:-10]
    ids, mask = Renderer(tok, get_tool_set("calculator").chat_schemas()).render(rows[0])
    assert len(ids) < 160 and 0 < sum(mask) < len(ids)


def test_chain_task_balances_depths_and_chains_each_result_into_the_next_step(tmp_path):
    splits = task.make_splits(300, 90, seed=11, task="chain")
    assert splits == task.make_splits(300, 90, seed=11, task="chain")
    assert not {p.question for p in splits["train"]} & {p.question for p in splits["test"]}
    for split, size in (("train", 300), ("test", 90)):
        depths = [p.depth for p in splits[split]]
        assert [depths.count(d) for d in (1, 2, 3)] == [size // 3] * 3, split
    for problem in splits["train"]:
        value = None
        for i, (expression, result) in enumerate(problem.steps):
            assert eval(expression) == result > 0  # noqa: S307  test-only check of our own strings
            if i:  # the step works on the previous result: GSM8K's chaining, what the model must carry over
                assert expression.startswith(f"{value} ")
            value = result
        assert problem.question.count("Then ") == problem.depth - 1
    # GSM8K's answer format, one <<expr=value>> line per step, read back as the agent loop's rows carry it
    assert task.main(["--task", "chain", "--out_dir", str(tmp_path / "raw"), "--train_size", "9", "--test_size",
                      "6", "--seed", "11"]) == 0
    assert data_prep_main(["--input_dir", str(tmp_path / "raw"), "--local_save_dir", str(tmp_path / "data")]) == 0
    import pyarrow.parquet as pq

    rows = pq.read_table(tmp_path / "data" / "test.parquet").to_pylist()
    problems = task.make_splits(9, 6, seed=11, task="chain")["test"]
    assert [depth_of(r) for r in rows] == [1, 2, 3, 1, 2, 3]
    assert [expressions_of(r) for r in rows] == [[e for e, _ in p.steps] for p in problems]
    assert [r["reward_model"]["ground_truth"] for r in rows] == [str(p.answer) for p in problems]


def assert_transcript_is_the_agent_loops(tok, row, calls):
    """The SFT transcript with `calls` calls equals the ids and mask verl's ToolAgentLoop builds from the same
    turns, with the recipe's real calculator answering each call."""
    config = harness.compose_trainer_config("calculator")
    tools = harness.load_tools(config)
    renderer = Renderer(tok, get_tool_set("calculator").chat_schemas())
    turns = scripted_turns(row, calls)
    server = ScriptedLLM(tok, lambda prompt: turns)

    async def go():
        return await harness.run_rollout(config, tok, server, tools, row)

    output = asyncio.run(go())
    ids, mask = renderer.render(row, calls)
    assert output.prompt_ids == ids[: len(output.prompt_ids)]
    assert output.prompt_ids + output.response_ids == ids
    assert [0] * len(output.prompt_ids) + list(output.response_mask) == mask
    assert output.num_turns == 2 + 2 * calls  # user, then per call the call and the tool; then the answer
    text = tok.decode(output.response_ids)
    truth = row["reward_model"]["ground_truth"]
    assert text.count("<tool_response>") == calls and text.endswith(f"#### {truth}<|im_end|>")
    return text


@pytest.mark.parametrize("use_tool", [True, False], ids=["calls_the_tool", "answers_straight_away"])
def test_sft_transcript_equals_the_agent_loops_tokens(small, use_tool):
    tok, rows = small
    for row in rows[:3]:
        text = assert_transcript_is_the_agent_loops(tok, row, 1 if use_tool else 0)
        truth = row["reward_model"]["ground_truth"]
        if use_tool:
            assert f"<tool_response>\n{truth}\n</tool_response>" in text  # the real tool ran
        else:
            assert text.startswith(f"#### {truth}")


def test_chain_transcripts_equal_the_agent_loops_tokens_for_every_number_of_calls(chain):
    """Depths 1-3, each with 0..depth calls: the tool responses, the mask across several tool turns and the
    token merging at every assistant/tool boundary are verl's; each call sends the previous call's result."""
    tok, rows = chain
    assert [depth_of(r) for r in rows] == [1, 2, 3, 1, 2, 3]
    for row in rows[:3]:
        for calls in range(depth_of(row) + 1):
            text = assert_transcript_is_the_agent_loops(tok, row, calls)
            results = [r.split("\n</tool_response>")[0] for r in text.split("<tool_response>\n")[1:]]
            sent = [json.loads(c.split("\n</tool_call>")[0])["arguments"]["expression"]
                    for c in text.split("<tool_call>\n")[1:]]
            assert sent == expressions_of(row)[:calls]
            for result, next_call in zip(results[:-1], sent[1:], strict=True):
                assert next_call.startswith(f"{result} ")  # carried from the tool's answer into the next call


def test_evaluator_scores_the_agent_loops_rollouts_with_the_recipes_reward(small):
    """Scripted turns of known quality in, accuracy and tool-call rate out (tools on and tools off)."""
    from harness.learning.evaluate import OVERRIDES, score_rollouts

    tok, rows = small
    rows = rows[:4]
    truth = [r["reward_model"]["ground_truth"] for r in rows]
    scripts = {  # by question: right with the tool, right with it, wrong with it, right without it
        rows[0]["extra_info"]["question"]: list(scripted_turns(rows[0])),
        rows[1]["extra_info"]["question"]: list(scripted_turns(rows[1])),
        rows[2]["extra_info"]["question"]: [scripted_turns(rows[2])[0], f"#### {int(truth[2]) + 1}"],
        rows[3]["extra_info"]["question"]: [f"#### {truth[3]}"],
    }

    def script_for(prompt):
        return next(turns for question, turns in scripts.items() if question in prompt)

    config = harness.compose_trainer_config("calculator", OVERRIDES)
    result = score_rollouts(config, tok, ScriptedLLM(tok, script_for), rows, "calculator", 1.0)
    assert result == {"n": 4, "acc": 0.75, "tool_call_rate": 0.75, "answers_ops1": 4, "strict_acc_ops1": 0.75,
                      "tool_calls_per_answer_ops1": 0.75, "correct_multi_op_answers": 0, "calls_per_op": 0.0}

    no_tools = [build_row(SourceRecord(r["extra_info"]["question"], r["extra_info"]["answer"], "t", i), "test",
                          get_tool_set("none")) for i, r in enumerate(rows)]
    config = harness.compose_trainer_config("none", OVERRIDES)
    result = score_rollouts(config, tok, ScriptedLLM(tok, lambda p: [f"#### {truth[0]}"]), no_tools, "none", 0.0)
    assert (result["n"], result["acc"], result["tool_call_rate"], result["strict_acc_ops1"]) == (4, 0.25, 0.0, 0.25)


def test_sft_learns_only_assistant_tokens(small, tmp_path):
    """Labels are the assistant tokens (the agent loop's response_mask == 1), nothing of the prompt or tool turn;
    and a few SFT steps on them lower the loss of the real model."""
    import torch
    from transformers import AutoModelForCausalLM

    from harness.learning.sft import batch_tensors

    tok, rows = small
    renderer = Renderer(tok, get_tool_set("calculator").chat_schemas())
    examples = [renderer.render(row) for row in rows[:4]]
    ids, attention, labels = batch_tensors(examples, tok.pad_token_id)
    learned = tok.decode([t for t in labels[0].tolist() if t != -100])
    call, final = scripted_turns(rows[0])
    assert learned == call + "<|im_end|>" + final + "<|im_end|>"
    assert int(attention[0].sum()) == len(examples[0][0])

    model = AutoModelForCausalLM.from_pretrained(str(tok.name_or_path))
    optim = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(8):
        loss = model(input_ids=ids, attention_mask=attention, labels=labels).loss
        optim.zero_grad()
        loss.backward()
        optim.step()
        losses.append(loss.item())
    assert losses[-1] < 0.8 * losses[0]


def test_sft_mixes_tool_and_direct_transcripts_at_the_asked_share(small):
    import random

    from harness.learning.sft import pick_transcripts

    tok, rows = small
    renderer = Renderer(tok, get_tool_set("calculator").chat_schemas())
    pairs = [[renderer.render(row, 0), renderer.render(row)] for row in rows] * 300
    call_id = tok.convert_tokens_to_ids("<tool_call>")

    def tool_share(fraction):
        picked = pick_transcripts(pairs, fraction, random.Random(0))
        calls = [any(t == call_id and m for t, m in zip(ids, mask, strict=True)) for ids, mask in picked]  # learned
        return sum(calls) / len(calls)

    assert tool_share(1.0) == 1.0 and tool_share(0.0) == 0.0
    assert abs(tool_share(0.5) - 0.5) < 0.03 and abs(tool_share(0.25) - 0.25) < 0.03


def test_sft_on_chains_calls_for_every_step_less_often_the_deeper_the_problem(chain):
    """Each step is a call with probability tool_fraction, up to the first that is not: the warm start carries a
    chain to its end with probability tool_fraction ** depth, leaving GRPO the deep problems to learn."""
    import random

    from harness.learning.sft import pick_transcripts

    tok, rows = chain
    renderer = Renderer(tok, get_tool_set("calculator").chat_schemas())
    by_calls = [[renderer.render(row, calls) for calls in range(depth_of(row) + 1)] for row in rows]
    call_id = tok.convert_tokens_to_ids("<tool_call>")

    def calls_learned(ids, mask):  # the model's own <tool_call>s (the prompt's tool instructions hold some too)
        return sum(t == call_id and m for t, m in zip(ids, mask, strict=True))

    picked = pick_transcripts(by_calls * 2000, 0.7, random.Random(0))
    for depth in (1, 2, 3):
        calls = [calls_learned(*example) for example, row in zip(picked, rows * 2000, strict=True)
                 if depth_of(row) == depth]
        assert abs(sum(c == depth for c in calls) / len(calls) - 0.7 ** depth) < 0.02, depth
        assert abs(sum(c == 0 for c in calls) / len(calls) - 0.3) < 0.02, depth
    assert [calls_learned(*example) for example in pick_transcripts(by_calls, 1.0, random.Random(1))] == [
        depth_of(row) for row in rows]


def test_the_unmasked_loop_trains_on_tool_tokens_and_scores_as_the_recipe(chain):
    """The broken-on-purpose loop (tests/testkit/unmasked_agent_loop.yaml): the same rollout and score as the
    recipe's, with the tool responses' tokens in the response mask."""
    from omegaconf import OmegaConf

    from recipes.gsm8k.agent_loop import REWARD_EXTRA_INFO, ScoredToolAgentLoop
    from testkit.unmasked_agent_loop import UnmaskedToolAgentLoop

    tok, rows = chain
    row = rows[2]  # three steps
    [entry] = OmegaConf.load(REPO_ROOT / "tests" / "testkit" / "unmasked_agent_loop.yaml")
    assert entry["name"] == "tool_agent" and entry["_target_"] == "testkit.unmasked_agent_loop.UnmaskedToolAgentLoop"
    config = harness.compose_trainer_config("calculator")
    tools = harness.load_tools(config)
    outputs = []
    for loop_class in (ScoredToolAgentLoop, UnmaskedToolAgentLoop):
        server = ScriptedLLM(tok, lambda prompt: scripted_turns(row))
        outputs.append(asyncio.run(harness.run_rollout(config, tok, server, tools, row, loop_class)))
    recipe, unmasked = outputs
    assert recipe.response_ids == unmasked.response_ids and 0 in recipe.response_mask
    assert set(unmasked.response_mask) == {1} and len(unmasked.response_mask) == len(recipe.response_mask)
    assert recipe.reward_score == unmasked.reward_score == 1.0
    assert unmasked.extra_fields[REWARD_EXTRA_INFO]["num_tool_calls"] == 3


def test_flipped_reward_negates_only_the_score():
    from data_prep.gsm8k_rows import DATA_SOURCE
    from recipes.gsm8k.reward import compute_score
    from testkit.flipped_reward import compute_score as flipped

    text = '<tool_call>\n{"name": "calculator", "arguments": {"expression": "1 + 2"}}\n</tool_call>\n#### 3'
    real, broken = compute_score(DATA_SOURCE, text, "3"), flipped(DATA_SOURCE, text, "3")
    assert real["score"] == 1.0 and broken == {**real, "score": -1.0}


@pytest.mark.parametrize("scores, failed", [
    ((0.37, 0.76, 0.0, 0.99), []),  # seed 0's run
    ((0.37, 0.55, 0.0, 0.99), ["after GRPO"]),  # +18 points only
    ((0.531, 0.934, 0.0, 0.99), []),  # a start above the 10-50% range: noted, not judged (it learned +40)
    ((0.37, 0.76, 0.60, 0.70), ["tool-call rate", "tools on"]),
])
def test_the_verdict_names_each_criterion_it_fails(scores, failed):
    from harness.learning.verdict import judge

    verdicts = judge(*scores)
    assert len(verdicts) == 3
    failed_texts = [text for ok, text in verdicts if not ok]
    assert len(failed_texts) == len(failed), failed_texts
    assert all(text.startswith(prefix) for text, prefix in zip(failed_texts, failed, strict=True)), failed_texts


def test_the_verdict_says_the_tools_off_criterion_holds_by_construction(tmp_path, capsys):
    """The warm start's SFT renders every transcript with the calculator offered: a prompt without tools is one it
    never saw, so its tools-off accuracy is ~0 whatever it learned. The verdict keeps the criterion (it catches a
    tools-off validation that offered the tool after all) and says, where it prints it, what it does not show."""
    from harness.learning import verdict

    paths = []
    for name, summary in (("sft", {"strict_acc": 0.4}), ("final", {"strict_acc": 0.9, "tool_call_rate": 1.0}),
                          ("tools_off", {"strict_acc": 0.0})):
        (tmp_path / f"{name}.json").write_text(json.dumps(summary))
        paths += [f"--{name}", str(tmp_path / f"{name}.json")]
    assert verdict.main(paths) == 0
    out = capsys.readouterr().out.splitlines()
    (note,) = [line for line in out if line.startswith("[verdict] note  tools off")]
    assert "never saw a prompt without tools" in note and "~0 by construction" in note
    (line,) = [line for line in out if "vs tools off" in line]
    assert line.startswith("[verdict] pass  tools on 0.900 vs tools off 0.000") and "by construction" in line


def chain_summary(acc, acc3, calls_per_op=1.0, rate=1.0):
    return {"strict_acc": acc, "strict_acc_ops1": 0.9, "strict_acc_ops3": acc3, "tool_call_rate": rate,
            "calls_per_op": calls_per_op, "correct_multi_op_answers": 100}


@pytest.mark.parametrize("final, failed", [
    (chain_summary(0.70, 0.60), []),
    (chain_summary(0.70, 0.35), ["3-step problems"]),  # the overall gain came from the shallow problems
    (chain_summary(0.70, 0.60, calls_per_op=0.7), ["calls per operation"]),  # right, but steps done in its head
    (chain_summary(0.45, 0.60), ["after GRPO"]),
])
def test_the_chain_verdict_judges_the_deepest_problems_and_calls_per_operation(final, failed, tmp_path, capsys):
    from harness.learning import verdict

    sft, off = chain_summary(0.30, 0.20, calls_per_op=0.5), chain_summary(0.0, 0.0, rate=0.0)
    verdicts = verdict.judge_chain(sft, final, off)
    assert len(verdicts) == 5
    assert [text.split(" ")[0] for ok, text in verdicts if not ok] == [f.split(" ")[0] for f in failed]
    paths = []
    for name, summary in (("sft", sft), ("final", final), ("off", off)):
        paths += [f"--{'tools_off' if name == 'off' else name}", str(tmp_path / f"{name}.json")]
        (tmp_path / f"{name}.json").write_text(json.dumps(summary))
    assert verdict.main([*paths, "--task", "chain"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("[verdict] note  SFT start 0.300: inside")
    assert out[-1] == f"VERDICT {'FAIL' if failed else 'PASS'} (chain task)"
    with pytest.raises(SystemExit):  # a one-step summary has no depth breakdown to judge
        (tmp_path / "final.json").write_text(json.dumps({"strict_acc": 0.7, "tool_call_rate": 1.0}))
        verdict.main([*paths, "--task", "chain"])


def _sft_args(small, tmp_path) -> list[str]:
    """The small rows as the SFT's train.parquet under tmp_path/data, and the arguments every SFT test passes."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    tok, rows = small
    (tmp_path / "data").mkdir()
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "data" / "train.parquet")
    return ["--model_dir", str(tok.name_or_path), "--data_dir", str(tmp_path / "data"), "--batch_size", "2",
            "--threads", "1"]


def test_sft_stops_and_saves_nothing_when_the_tool_only_phase_has_not_converged(small, tmp_path):
    """learn_cpu.sh restarts a stuck warm start from a new init on exit NOT_CONVERGED; a converged one is saved."""
    from harness.learning import sft

    base = [*_sft_args(small, tmp_path), "--steps", "3"]
    common = [*base, "--tool_only_steps", "2"]
    # a random model's loss is far above 1e-6 after two steps, and far below 1e6
    assert sft.main([*common, "--out_dir", str(tmp_path / "stuck"), "--converged_loss", "1e-6"]) == sft.NOT_CONVERGED
    assert not (tmp_path / "stuck").exists()
    assert sft.main([*common, "--out_dir", str(tmp_path / "ok"), "--converged_loss", "1e6"]) == 0
    assert (tmp_path / "ok" / "model.safetensors").exists()
    assert_carries_transformers_version(tmp_path / "ok")  # the warm start GRPO then loads
    assert_carries_transformers_version(small[0].name_or_path)  # the random model it started from
    with pytest.raises(SystemExit):  # the check needs a tool-only phase to judge
        sft.main([*base, "--out_dir", str(tmp_path / "x"), "--converged_loss", "0.1"])


def test_sft_hands_its_weight_decay_to_the_optimizer(small, tmp_path, monkeypatch):
    import torch

    from harness.learning import sft

    seen, adamw = [], torch.optim.AdamW

    def recording(params, **kw):
        seen.append(kw["weight_decay"])
        return adamw(params, **kw)

    monkeypatch.setattr(torch.optim, "AdamW", recording)
    args = _sft_args(small, tmp_path)
    for decay in ("0", "0.25"):
        sft.main([*args, "--steps", "1", "--out_dir", str(tmp_path / decay), "--weight_decay", decay])
    assert seen == [0.0, 0.25]


def test_a_traced_chain_run_keeps_its_traces_in_the_spool_for_upload(tmp_path):
    """`TASK=chain TRACE=on TRACE_RELAY=offline bash scripts/learn_cpu.sh`, its GRPO launch as the script makes it
    (PROFILE=cpu_learn, the chain task's turns and lengths) in a DRY_RUN: the profile's tracing (off) is turned on,
    and the offline relay would keep every trace in OUTPUT_DIR/trace_spool, whose upload command the plan prints.
    The relay's spool and upload themselves: tests/test_launch_trace_relay.py; a depth-3 root's messages:
    tests/test_trace_conversation.py."""
    from recipes.launch.decision import traces_line
    from testkit.launcher import plan

    assert task.main(["--task", "chain", "--out_dir", str(tmp_path / "raw"), "--train_size", "9",
                      "--test_size", "3"]) == 0
    assert data_prep_main(["--input_dir", str(tmp_path / "raw"), "--local_save_dir", str(tmp_path / "data")]) == 0
    out = tmp_path / "outputs"
    planned = plan(tmp_path / "data", "actor_rollout_ref.rollout.multi_turn.max_assistant_turns=5",
                   "data.max_response_length=192", PROFILE="cpu_learn", VERL_PLATFORM="cpu", DRY_RUN="1", TRACE="on",
                   TRACE_RELAY="offline", WANDB_ENTITY="me", OUTPUT_DIR=str(out))
    assert planned.preflight.ok, planned.err
    assert planned.row("tracing").startswith("weave,")
    assert "at most 5 assistant turns" in planned.row("tools")
    relay = planned.launch.relay.describe()
    assert f"serve --spool {out}/trace_spool" in relay and "--offline --entity me" in relay, relay
    assert f"gsm8k-upload-traces --spool {out}/trace_spool" in traces_line(planned.launch)
