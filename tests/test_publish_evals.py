"""gsm8k-publish-evals: validation dumps written by verl's own writer from real agent-loop rollouts,
published as Weave Evaluations through the real weave client (on the in-memory trace server)."""

import asyncio
import contextvars
import io
import json
import os
import shutil
import subprocess
import threading
import time
from collections import Counter
from contextlib import redirect_stdout

import pytest

from data_prep.gsm8k_rows import SourceRecord, build_row
from harness import agent_loop_inprocess as harness
from harness.qwen_tokenizer import load_qwen25_tokenizer
from harness.standins.scripted_llm import ScriptedLLM, tool_call
from harness.standins.weave_memory_server import install_memory_weave_client
from recipes.gsm8k.agent_loop import ScoredToolAgentLoop
from recipes.gsm8k.tool_sets import get_tool_set
from recipes.gsm8k.trajectory import count_tool_errors
from recipes.results import weave_publish
from recipes.results.dumps import load_dump_dir
from recipes.results.scoring import summarize
from recipes.results.weave_publish import SCORE_KEYS, SCORER
from testkit.commands import command
from testkit.dumps import write_verl_dump
from tools.calculator import NAME as CALCULATOR

pytestmark = pytest.mark.integration

PROJECT = "gsm8k-evals-test"
EXPERIMENT = "qwen-tools"
TOOL_BONUS = 0.1  # the run's reward_kwargs.tool_call_bonus: "reward" must be what training paid
QUESTIONS = [("A baker has 48 muffins and sells half. How many are left?", "24"),
             ("Tom reads 12 pages a day for 6 days. How many pages?", "72")]
SCRIPTS = {  # step -> question -> one script per sample (step 2 sampled n=3: pass@k)
    0: [[["Half of 48 is 25.\n#### 25"]],
        [[tool_call(CALCULATOR, expression="12*6"), "12*6 = 72.\n#### 72"]]],
    2: [[[tool_call(CALCULATOR, expression="48 halved"), tool_call(CALCULATOR, expression="48/2"), "#### 24"],
         ["It is 24."],
         [tool_call("search", query="muffins"), "#### 24"]],
        [["#### 72"], ["12*6 = 72\n#### 72"], ["#### 70"]]],
}


@pytest.fixture(scope="module")
def tok():
    return load_qwen25_tokenizer()


@pytest.fixture(scope="module")
def validation_dir(tmp_path_factory, tok):
    """outputs/<experiment>/validation with 0.jsonl and 2.jsonl, written as RayPPOTrainer._validate does from the
    recipe's agent loop, which scored each trajectory with the run's reward kwargs (tool bonus TOOL_BONUS)."""

    config = harness.compose_trainer_config(
        "calculator", (f"reward.custom_reward_function.reward_kwargs.tool_call_bonus={TOOL_BONUS}",))
    tools = harness.load_tools(config)
    rows = [build_row(SourceRecord(q, f"#### {gt}", "test", i), "test", get_tool_set("calculator"))
            for i, (q, gt) in enumerate(QUESTIONS)]
    folder = tmp_path_factory.mktemp("outputs") / EXPERIMENT / "validation"
    playing = contextvars.ContextVar("script")
    llm = ScriptedLLM(tok, lambda prompt: playing.get())

    async def one(script, row):
        playing.set(script)
        return await harness.run_rollout(config, tok, llm, tools, row, ScoredToolAgentLoop)

    for step, per_question in SCRIPTS.items():
        # verl repeats each prompt n times, interleaved: q0 s0, q0 s1, ..., q1 s0, ...
        jobs = [(script, rows[q]) for q, scripts in enumerate(per_question) for script in scripts]

        async def rollouts(jobs=jobs):
            return await asyncio.gather(*(one(script, row) for script, row in jobs))

        outputs = asyncio.run(rollouts())
        write_verl_dump(tok, outputs, [row["reward_model"]["ground_truth"] for _, row in jobs], folder, step)
    return folder

# one well-formed dump line: verl's columns and the reward's keys the run's agent loop scored
A_DUMP_LINE = {"input": "q", "output": "a", "gts": "1", "score": 0.0, "acc_strict": 0.0, "acc_flexible": 0.0,
               "format_ok": 0.0, "num_tool_calls": 0, "num_bad_tool_calls": 0, "pred": ""}


def use_memory_client(client):
    from weave.trace.context import weave_client_context

    weave_client_context.set_weave_client_global(None)  # weave keeps the old one otherwise
    weave_client_context.set_weave_client_global(client)  # scripts' weave.init(PROJECT) returns it


@pytest.fixture(scope="module")
def published(validation_dir):
    """Both steps published once by the script's main(), in this process, onto one in-memory server."""
    server, client = install_memory_weave_client(PROJECT)
    rc, out = run_main(["--validation_dir", str(validation_dir), "--project", PROJECT, "--experiment", EXPERIMENT,
                        "--model_path", "Qwen/Qwen2.5-3B",
                        "--tool_set", "calculator"])
    yield server, client, rc, out
    client.flush()
    use_memory_client(None)


def run_main(argv):
    """gsm8k-publish-evals's main() in this process (the memory server lives here), with a W&B key set."""
    from recipes.results import publish as module
    previous = os.environ.get("WANDB_API_KEY")
    os.environ["WANDB_API_KEY"] = "offline-test-key"
    out = io.StringIO()
    try:
        with redirect_stdout(out):
            rc = module.main(argv)
    finally:
        if previous is None:
            os.environ.pop("WANDB_API_KEY")
        else:
            os.environ["WANDB_API_KEY"] = previous
    return rc, out.getvalue()


def evaluations(server):
    calls = server.recorded_calls()
    evals = {c["attributes"]["gsm8k_recipe_eval"]["step"]: c
             for c in calls if "/op/Evaluation.evaluate:" in c["op_name"]}
    children = {}
    for c in calls:
        children.setdefault(c["parent_id"], []).append(c)
    return evals, children


def dump_records(validation_dir, step):
    return [r for r in load_dump_dir(validation_dir) if r["step"] == step]


def question_of(record):
    """Which QUESTIONS entry a dump line answers, read off the prompt independently of the code under test."""
    (question,) = [q for q, _ in QUESTIONS if q in record["input"]]
    return question


def test_each_validation_step_is_one_evaluation(published, validation_dir):
    server, _, rc, out = published
    assert rc == 0, out
    assert out.strip().splitlines()[-1] == "RESULT published=2 skipped=0"
    evals, children = evaluations(server)
    assert sorted(evals) == [0, 2]
    for step, call in evals.items():
        assert call["ended"] and call["exception"] is None
        assert call["display_name"] == f"{EXPERIMENT} step {step}"
        model_ref = call["inputs"]["model"]
        assert f"/object/{EXPERIMENT}-step{step}:" in model_ref
        model = server.objects[model_ref.rsplit(":", 1)[1]]
        assert (model["experiment"], model["step"], model["model_path"], model["tool_set"]) == (
            EXPERIMENT, step, "Qwen/Qwen2.5-3B", "calculator")
        assert len([c for c in children[call["id"]] if "/op/Evaluation.predict_and_score:" in c["op_name"]]) == len(
            dump_records(validation_dir, step))


def test_models_are_named_after_the_experiment_never_a_folder(validation_dir, tmp_path):
    """No --experiment: refused, not guessed from the folder above the dumps (a CPU smoke's is 'outputs')."""
    smoke = tmp_path / "outputs" / "validation"
    shutil.copytree(validation_dir, smoke)
    server, client = install_memory_weave_client(PROJECT)
    try:
        with pytest.raises(SystemExit) as refused:
            run_main(["--validation_dir", str(smoke), "--project", PROJECT])
    finally:
        client.flush()
        use_memory_client(None)
    assert refused.value.code == 2 and not server.recorded_calls()


def test_an_evaluation_only_run_is_no_training_step(validation_dir, tmp_path):
    """scripts/eval_gsm8k.sh evaluates an exported checkpoint in a validation-only run: verl dumps it as step 0,
    which here is no training step. The model is named as the eval names it, without -step0."""
    only = tmp_path / "validation"
    only.mkdir()
    shutil.copy(validation_dir / "0.jsonl", only / "0.jsonl")
    server, client = install_memory_weave_client(PROJECT)
    try:
        rc, out = run_main(["--validation_dir", str(only), "--project", PROJECT, "--experiment", "eval_hf_calculator",
                            "--model_name", "eval_hf_calculator", "--model_path", "outputs/qwen-tools/hf"])
        client.flush()
    finally:
        use_memory_client(None)
    assert rc == 0, out
    (call,) = evaluations(server)[0].values()
    assert call["display_name"] == "eval_hf_calculator"
    assert "/object/eval_hf_calculator:" in call["inputs"]["model"]
    model = server.objects[call["inputs"]["model"].rsplit(":", 1)[1]]
    assert (model["step"], model["model_path"]) == (None, "outputs/qwen-tools/hf")


def test_predictions_are_the_dump_lines_scored_by_the_recipe(published, validation_dir):
    server, *_ = published
    evals, children = evaluations(server)
    rows = server.table_rows_by_digest()
    for step, call in evals.items():
        records = dump_records(validation_dir, step)
        predictions = [c for c in children[call["id"]] if "/op/Evaluation.predict_and_score:" in c["op_name"]]
        got, want = Counter(), Counter()
        for p in predictions:
            row = rows[p["inputs"]["example"].rsplit("/attr/rows/id/", 1)[1]]
            output, scores = p["output"]["output"], p["output"]["scores"][SCORER]
            score_calls = {c["op_name"].rsplit("/op/", 1)[1].split(":")[0]: c["output"] for c in children[p["id"]]
                           if "/op/Model.predict:" not in c["op_name"]}
            assert score_calls == {SCORER: scores}  # also a scorer call: what the compare view reads
            got[json.dumps([row["question"], row["ground_truth"], output, scores], sort_keys=True)] += 1
        for r in records:  # what the run's agent loop scored, as the dump carries it: nothing re-scored
            scores = {"strict_correct": bool(r["acc_strict"]), "flexible_correct": bool(r["acc_flexible"]),
                      "format_ok": bool(r["format_ok"]), "tool_calls": r["num_tool_calls"],
                      "bad_tool_calls": r["num_bad_tool_calls"], "tool_errors": count_tool_errors(r["output"]),
                      "reward": r["score"]}
            assert tuple(scores) == SCORE_KEYS
            output = {"response": r["output"], "final_answer": r["pred"]}
            want[json.dumps([question_of(r), r["gts"], output, scores], sort_keys=True)] += 1
        assert got == want
    # the fixture's scripts reach every score: a tool error, a malformed call, a bonus-paid wrong answer...
    step2 = [json.loads(k)[3] for k in want]
    assert {s["tool_errors"] for s in step2} == {0, 1} and {s["bad_tool_calls"] for s in step2} == {0, 1}
    assert any(s["reward"] == pytest.approx(1 + TOOL_BONUS) for s in step2)


def test_rows_line_up_across_steps(published):
    """Every step's predictions point at the same dataset rows (by row digest), one row per question."""
    server, *_ = published
    evals, children = evaluations(server)
    rows = server.table_rows_by_digest()
    digests = {step: {c["inputs"]["example"].rsplit("/attr/rows/id/", 1)[1] for c in children[call["id"]]
                      if "/op/Evaluation.predict_and_score:" in c["op_name"]} for step, call in evals.items()}
    assert digests[0] == digests[2] and len(digests[0]) == len(QUESTIONS)
    assert sorted((rows[d]["question"], rows[d]["ground_truth"]) for d in digests[0]) == sorted(QUESTIONS)
    assert len({rows[d]["question_id"] for d in digests[0]}) == len(QUESTIONS)
    for call in evals.values():  # the Evaluation's dataset is the published one (name gsm8k_test)
        assert "/object/gsm8k_test-evaluation:" in call["inputs"]["self"]


def test_tools_on_and_off_prompts_share_rows(validation_dir, tok):
    """The same question asked without tools (another system prompt, no tool schema) is the same row."""
    with_tools = dump_records(validation_dir, 0)[0]
    question, gt = next((q, gt) for q, gt in QUESTIONS if q in with_tools["input"])
    row = build_row(SourceRecord(question, f"#### {gt}", "test", 0), "test", get_tool_set("none"))
    ids = tok.apply_chat_template(row["prompt"], add_generation_prompt=True, return_dict=True)["input_ids"]
    without_tools = {"input": tok.decode(ids, skip_special_tokens=True), "gts": gt}
    assert without_tools["input"] != with_tools["input"]
    assert weave_publish.question_row(without_tools) == weave_publish.question_row(with_tools)
    assert weave_publish.question_row(with_tools)["question"] == question


def test_summary_is_eval_summarys(published, validation_dir, repo_root):
    server, *_ = published
    evals, _ = evaluations(server)
    assert evals[0]["output"]["output"] == pytest.approx(summarize(dump_records(validation_dir, 0), (1,)))
    step2 = summarize(dump_records(validation_dir, 2), (1, 3))
    assert "pass@3_strict" in step2 and evals[2]["output"]["output"] == pytest.approx(step2)
    # and the same numbers as the script users run
    proc = subprocess.run([*command("gsm8k-eval-summary"), "--validation_dir", str(validation_dir),
                           "--step", "2", "--k", "1", "--k", "3"], cwd=repo_root, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    from_script = json.loads((validation_dir / "summary.json").read_text())
    assert from_script.pop("step") == 2 and evals[2]["output"]["output"] == pytest.approx(from_script)
    # weave's own per-scorer summary agrees: accuracy = fraction of strict_correct
    assert evals[2]["output"][SCORER]["strict_correct"]["true_fraction"] == pytest.approx(step2["strict_acc"])
    assert evals[2]["output"][SCORER]["tool_calls"]["mean"] == pytest.approx(step2["tool_calls_per_answer"])


def test_publishing_again_sends_nothing(published, validation_dir):
    server, client, *_ = published
    use_memory_client(client)
    before = (len(server.starts), len(server.ends), len(server.objects), len(server.tables), len(server.feedback))
    rc, out = run_main(["--validation_dir", str(validation_dir), "--project", PROJECT, "--experiment", EXPERIMENT,
                        "--model_path", "Qwen/Qwen2.5-3B",
                        "--tool_set", "calculator"])
    client.flush()
    assert rc == 0, out
    assert out.strip().splitlines()[-1] == "RESULT published=0 skipped=2"
    assert "step 2: already in Weave (qwen-tools/step2/" in out
    now = (len(server.starts), len(server.ends), len(server.objects), len(server.tables), len(server.feedback))
    assert now == before


def test_a_failed_publish_is_published_again(validation_dir, monkeypatch):
    """An evaluation that failed half-way (ended with an exception) does not count as published."""
    server, client = install_memory_weave_client(PROJECT)
    publisher = weave_publish.Publisher(client, weave_publish.RunInfo(EXPERIMENT))
    dump = weave_publish.read_step_dump(validation_dir / "2.jsonl")
    real_prediction, scored = weave_publish.prediction, []

    def dies_on_the_third_line(record):
        if len(scored) == 2:
            raise RuntimeError("killed mid-publish")
        scored.append(record)
        return real_prediction(record)

    monkeypatch.setattr(weave_publish, "prediction", dies_on_the_third_line)
    with pytest.raises(RuntimeError, match="killed mid-publish"):
        publisher.publish(dump)
    monkeypatch.setattr(weave_publish, "prediction", real_prediction)
    try:
        assert publisher.publish(dump).published
        assert not publisher.publish(dump).published
        client.flush()
    finally:
        use_memory_client(None)
    runs = [c for c in server.recorded_calls() if "/op/Evaluation.evaluate:" in c["op_name"]]
    assert [("killed mid-publish" in (c["exception"] or "")) for c in runs] == [True, False]


def test_watcher_publishes_as_dumps_land_and_never_raises(validation_dir, tmp_path, caplog):
    """--watch beside a 'trainer' (a sleep process): step 0 is there at the start, step 2 lands later, a
    malformed dump and a failing server are logged, and the watcher ends after the trainer has exited."""
    server, client = install_memory_weave_client(PROJECT)
    watched = tmp_path / EXPERIMENT / "validation"  # does not exist yet when the watcher starts
    trainer = subprocess.Popen(["sleep", "120"])
    real_query = server.calls_query_stream
    failures = []

    def flaky_query(req):  # W&B unreachable for the first look at step 2
        if not failures and len(evaluations(server)[0]) == 1:
            failures.append(req)
            raise ConnectionError("W&B unreachable")
        return real_query(req)

    server.calls_query_stream = flaky_query

    result = {}

    def watcher():  # in a thread, so that a watcher that never stops fails the test instead of hanging it
        result["rc"], _ = run_main(["--validation_dir", str(watched), "--project", PROJECT, "--experiment", EXPERIMENT,
                                    "--watch", "--stop_when_pid_exits", str(trainer.pid), "--poll_seconds", "0.1"])

    thread = threading.Thread(target=watcher, daemon=True)
    try:
        with caplog.at_level("INFO", logger="recipes.results.eval_watch"):
            thread.start()
            watched.mkdir(parents=True)
            shutil.copy(validation_dir / "0.jsonl", watched / "0.jsonl")
            (watched / "1.jsonl").write_text(json.dumps(A_DUMP_LINE) + '\n{"input": "q", "outp\n')
            wait_for(lambda: len(evaluations(server)[0]) == 1)
            shutil.copy(validation_dir / "2.jsonl", watched / "2.jsonl")
            wait_for(lambda: len(evaluations(server)[0]) == 2)
            trainer.terminate()  # not reaped until the watcher is done: it must treat a zombie as exited
            thread.join(timeout=60)
            assert not thread.is_alive(), "the watcher did not stop after the trainer exited"
    finally:
        trainer.kill()
        trainer.wait()
        client.flush()
        use_memory_client(None)
    rc = result["rc"]
    assert rc == 1  # the malformed dump could not be published: reported in the exit code, never raised
    assert sorted(evaluations(server)[0]) == [0, 2] and failures
    log = caplog.text
    assert f"{watched / '1.jsonl'}:2: not JSON" in log
    assert "publishing step 2 failed (ConnectionError: W&B unreachable); retrying" in log
    assert "step 2: published 6 predictions" in log


def wait_for(condition, timeout=60.0):
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError("condition not met in time")
        time.sleep(0.05)


@pytest.mark.parametrize("case", ["missing_dir", "empty_dir", "bad_line", "no_credentials"])
def test_bad_input_is_one_clear_line(case, tmp_path, repo_root, validation_dir):
    env = {k: v for k, v in os.environ.items() if k not in ("WANDB_API_KEY", "NETRC")}
    env.update({"NETRC": str(tmp_path / "no-netrc"), "WANDB_API_KEY": "k"})
    folder = tmp_path / "validation"
    if case != "missing_dir":
        folder.mkdir()
    if case == "bad_line":
        (folder / "20.jsonl").write_text(json.dumps({**A_DUMP_LINE, "step": 20}) + '\n{"input": "q", "output": "a"}\n')
    if case == "no_credentials":
        shutil.copy(validation_dir / "0.jsonl", folder / "0.jsonl")
        env.pop("WANDB_API_KEY")
    script = [*command("gsm8k-publish-evals"), "--validation_dir", str(folder), "--experiment", "e"]
    proc = subprocess.run(script, cwd=repo_root, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and proc.stdout == ""
    expected = {"missing_dir": f"error: validation dir {folder} does not exist",
                "empty_dir": f"error: no <step>.jsonl dumps in {folder}",
                "bad_line": f"error: {folder / '20.jsonl'}:2: missing gts",
                "no_credentials": "error: no W&B credentials in this environment "
                                  "(set WANDB_API_KEY or run `wandb login`)"}
    assert proc.stderr.startswith(expected[case]) and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    if case == "no_credentials":  # what eval_gsm8k.sh does when W&B logging is on but there is no key
        proc = subprocess.run([*script, "--skip_without_credentials"], cwd=repo_root, env=env, capture_output=True,
                              text=True, timeout=60)
        assert proc.returncode == 0 and proc.stdout.startswith("not publishing to Weave: no W&B credentials")
