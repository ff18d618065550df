"""The GPU learning check's pieces (scripts/learn_gpu.sh, scripts/harness/learning/gpu_pipeline.py) that run here: the
model SGLang serves and the preflight's model check that refuses one it cannot; the tools-off validation file beside
the tools-on one in one launch (the data check, verl's own dataset and overlong filter, the no-tools agent loop); the
scores of that launch's two validations; the profile. scripts/learn_gpu.sh end to end, DRY_RUN and DEVICE=cpu:
tests/test_gpu_learning_e2e.py."""

import asyncio
import json
import shutil
import sys

import pyarrow.parquet as pq
import pytest

from data_prep.gsm8k import main as data_prep_main
from data_prep.gsm8k_rows import DATA_SOURCE_NO_TOOLS
from harness import agent_loop_inprocess as harness
from harness.learning import task
from harness.learning.small_model import SGLANG_SHAPE, build_from_rows
from harness.standins.scripted_llm import ScriptedLLM, tool_call
from recipes.constants import AGENT_NAME_NO_TOOLS, PROFILE_DIR, REPO_ROOT
from recipes.gpu_env.kernel_census import QWEN25, modules_for, shape_of
from recipes.gsm8k.reward_keys import CALLED_TOOL, TOOL_SET, TURNS
from recipes.preflight.checks import check_agent_loops, check_data
from recipes.preflight.findings import Report
from recipes.preflight.prompt_lengths import check_prompt_lengths, prompt_lengths
from recipes.preflight.sglang_model import check_sglang_model, model_problems
from test_cpu_learning import rows_of

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """The same tokenizer rows, one model folder per shape: {"cpu": ..., "sglang": ...}."""
    rows = rows_of(task.make_splits(train_size=60, test_size=4, seed=2)["train"])
    root = tmp_path_factory.mktemp("shapes")
    out = {}
    for name, shape in (("cpu", None), ("sglang", SGLANG_SHAPE)):
        build_from_rows(rows, root / name, seed=0, shape=shape)
        out[name] = root / name
    return out


@pytest.fixture(scope="module")
def two_files(tmp_path_factory):
    """The learning task's held-out problems prepared twice by the real data prep: tools on and tools off."""
    root = tmp_path_factory.mktemp("two_files")
    assert task.main(["--out_dir", str(root / "raw"), "--train_size", "12", "--test_size", "6", "--seed", "4"]) == 0
    for folder, extra in (("on", []), ("off", ["--tool_set", "none"])):
        assert data_prep_main(["--input_dir", str(root / "raw"), "--local_save_dir", str(root / folder), *extra]) == 0
    return root / "on" / "test.parquet", root / "off" / "test.parquet"


def launch_config(model, *overrides, data_dir=None):
    """The config a launch with PROFILE=gpu_learn composes (the launcher's knob mapping, real paths)."""
    knobs = {"profile": "gpu_learn", "model_path": str(model)} | ({"data_dir": str(data_dir)} if data_dir else {})
    return harness.compose_trainer_config("calculator", tuple(overrides), **knobs)


def test_the_sglang_shape_has_the_one_gpu_smokes_first_use_kernels(models):
    """head_dim 64 with GQA group 4: the modules the smoke compiled for Qwen2.5-0.5B (which `--warm-kernels` prebuilds),
    the KV-cache row of 256 bytes; the CPU shape's head_dim 16 is none of FlashInfer's."""
    config = json.loads((models["sglang"] / "config.json").read_text())
    shape = shape_of(str(models["sglang"]), config)
    assert (shape.head_dim, shape.gqa_group, shape.kv_row_bytes, config["hidden_size"]) == (64, 4, 256, 128)
    assert [m.key for m in modules_for(shape)] == [m.key for m in modules_for(QWEN25[0])]
    cpu = shape_of("m", json.loads((models["cpu"] / "config.json").read_text()))
    assert (cpu.head_dim, cpu.gqa_group) == (16, 1)


def test_the_preflight_serves_the_sglang_shape_and_refuses_the_cpu_shape_in_one_line(models):
    ok, refused = Report(), Report()
    check_sglang_model(launch_config(models["sglang"]), ok)
    check_sglang_model(launch_config(models["cpu"]), refused)
    assert ok.errors == [] and any("head_dim 64" in n and "serve it" in n and "one token each" in n for n in ok.notes)
    (line,) = refused.errors
    assert "head_dim 16 (hidden_size 128 / 8 heads)" in line and "64, 128, 256, 512" in line and "\n" not in line
    # the CPU stand-in (DEVICE=cpu) serves any shape: nothing to check there
    cpu_rollout = Report()
    check_sglang_model(launch_config(models["cpu"], "actor_rollout_ref.rollout.name=hf_cpu"), cpu_rollout)
    assert cpu_rollout.errors == cpu_rollout.notes == []


def _split_tool_tags(folder):
    """The folder's tokenizer rebuilt without the hermes tool tags as tokens of their own."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    chat_template = AutoTokenizer.from_pretrained(str(folder)).chat_template
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer, tok.decoder = pre_tokenizers.ByteLevel(add_prefix_space=False), decoders.ByteLevel()
    special = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    tok.train_from_iterator(["<tool_call> 1 + 2 </tool_call> #### 3"], trainers.BpeTrainer(
        vocab_size=300, special_tokens=special, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        (folder / name).unlink(missing_ok=True)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    fast.chat_template = chat_template
    fast.save_pretrained(str(folder))


def _set_config(folder, **changes):
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, **changes}))


@pytest.mark.parametrize("defect, expected", [
    ("tool tags", "splits <tool_call> and </tool_call> into several tokens"),
    ("vocabulary", "has vocab_size 512 but its tokenizer has"),
    ("heads", "has 8 attention heads and 3 KV heads"),
    ("context", "has max_position_embeddings 256, less than"),
    ("head_dim", "has head_dim 32 (config.json's head_dim)"),
])
def test_a_model_sglang_cannot_serve_as_asked_is_refused_with_one_line(models, tmp_path, defect, expected):
    folder = tmp_path / "m"
    shutil.copytree(models["sglang"], folder)
    {"tool tags": lambda: _split_tool_tags(folder), "vocabulary": lambda: _set_config(folder, vocab_size=512),
     "heads": lambda: _set_config(folder, num_key_value_heads=3),
     "context": lambda: _set_config(folder, max_position_embeddings=256),
     "head_dim": lambda: _set_config(folder, head_dim=32)}[defect]()
    errors, _ = model_problems(folder, offers_tools=True, context_needed=352)
    assert len(errors) == 1 and expected in errors[0], errors


def test_a_launch_validates_a_tools_off_file_beside_the_tools_on_one(two_files, models):
    """Tools-off rows ask for the loop that offers no tools and have their own data_source; the data check takes
    them as a validation file (not as training data), and the agent loops' config must declare their loop."""
    on, off = two_files
    row = pq.read_table(off).to_pylist()[0]
    assert (row["agent_name"], row["data_source"]) == (AGENT_NAME_NO_TOOLS, DATA_SOURCE_NO_TOOLS)
    both = launch_config(models["sglang"], f"data.train_files={on}", f"data.val_files=[{on},{off}]")
    report = Report()
    assert check_data(both, ["calculator"], report) == 6 and report.errors == []
    check_agent_loops(both, report)
    assert report.errors == []
    trained_without = Report()
    check_data(launch_config(models["sglang"], f"data.train_files={off}", f"data.val_files={on}"), ["calculator"],
               trained_without)
    (line,) = trained_without.errors
    assert "prepared for tool set 'none'" in line
    undeclared = Report()
    check_agent_loops(launch_config(models["sglang"], f"data.val_files=[{on},{off}]",
                                    "actor_rollout_ref.rollout.agent.agent_loop_config_path="
                                    f"{REPO_ROOT}/tests/testkit/unmasked_agent_loop.yaml"), undeclared)
    assert undeclared.errors == [f"{REPO_ROOT}/tests/testkit/unmasked_agent_loop.yaml does not declare "
                                 "'tool_agent_no_tools', the agent_name the data's rows ask for"]


@pytest.mark.parametrize("filtered", [True, False])
def test_the_preflight_counts_the_rows_verls_overlong_filter_drops(two_files, models, filtered):
    """verl renders every row with the run's tool schemas: the tools-off prompts, 40 tokens in the agent loop, are
    longer than 256 that way, and verl's own dataset silently loses the whole file. The preflight says so first."""
    from transformers import AutoTokenizer
    from verl.utils.dataset.rl_dataset import RLHFDataset

    on, off = two_files
    config = launch_config(models["sglang"], f"data.val_files=[{on},{off}]",
                           f"data.filter_overlong_prompts={filtered}", "data.filter_overlong_prompts_workers=1")
    tokenizer = AutoTokenizer.from_pretrained(str(models["sglang"]))
    counted = {path: prompt_lengths(config, path, tokenizer) for path in two_files}
    assert max(counted[on]) <= 256 < min(counted[off])
    report = Report()
    check_prompt_lengths(config, report)
    dataset = RLHFDataset([str(on), str(off)], tokenizer, config.data)
    if filtered:
        (line,) = report.errors
        assert str(off) in line and "6 of 6 rows" in line and "ALL be dropped" in line and report.warnings == []
        assert len(dataset) == 6  # verl's filter: the tools-on file only
    else:
        assert report.errors == report.warnings == []
        assert len(dataset) == 12 and sorted({dataset[i]["data_source"] for i in range(12)}) == [
            "openai/gsm8k", DATA_SOURCE_NO_TOOLS]


def test_the_no_tools_loop_offers_nothing_and_answers_a_call_anyway_as_verl_does(two_files, models):
    """The recipe's loop for tools-off rows, in the worker of a launch that offers the calculator: no tool block
    in the prompt, a call gets verl's "Unknown function" turn, and the in-loop reward marks the row's tool set."""
    from transformers import AutoTokenizer

    from recipes.gsm8k.agent_loop import REWARD_EXTRA_INFO, NoToolsAgentLoop, ScoredToolAgentLoop

    tok = AutoTokenizer.from_pretrained(str(models["sglang"]))
    config = launch_config(models["sglang"])
    tools = harness.load_tools(config)
    outputs = {}
    for loop, path in ((NoToolsAgentLoop, two_files[1]), (ScoredToolAgentLoop, two_files[0])):
        row = pq.read_table(path).to_pylist()[0]  # the same problem, prepared without and with tools
        turns = [tool_call("calculator", expression="1 + 2"), f"#### {row['reward_model']['ground_truth']}"]
        llm = ScriptedLLM(tok, lambda prompt, turns=turns: turns)
        outputs[loop] = (asyncio.run(harness.run_rollout(config, tok, llm, tools, row, loop)), llm, row)
    output, llm, row = outputs[NoToolsAgentLoop]
    prompt = tok.decode(llm.calls[0]["prompt_ids"])
    assert "<tools>" not in prompt and "calculator" not in prompt
    text = tok.decode(output.response_ids)
    truth = row["reward_model"]["ground_truth"]
    assert "Unknown function 'calculator'. Available tools: []" in text and text.endswith(f"#### {truth}<|im_end|>")
    extra = output.extra_fields[REWARD_EXTRA_INFO]
    assert (output.reward_score, extra[TOOL_SET], extra[TURNS], extra[CALLED_TOOL]) == (1.0, "none", 4, 0.0)
    with_tools, llm, _ = outputs[ScoredToolAgentLoop]  # the tools-on row in the recipe's loop: the calculator ran
    assert "<tools>" in tok.decode(llm.calls[0]["prompt_ids"])
    assert "<tool_response>\n3\n</tool_response>" in tok.decode(with_tools.response_ids)
    assert with_tools.extra_fields[REWARD_EXTRA_INFO][CALLED_TOOL] == 1.0


def _dump_line(tool_set, correct, calls, turns):
    return {"input": f"q{tool_set}{correct}{calls}{turns}", "output": "...", "gts": "3", "score": float(correct),
            "step": 0, "acc": float(correct), "acc_strict": float(correct), "acc_flexible": float(correct),
            "format_ok": 1.0, "num_tool_calls": calls, "num_bad_tool_calls": 0, "pred": "3", "ref_ops": 1,
            CALLED_TOOL: float(calls > 0), TURNS: turns, TOOL_SET: tool_set}


def test_one_validation_of_both_files_splits_by_tool_set_and_agrees_with_verls_metrics(tmp_path):
    from harness.learning import validation_scores

    lines = [_dump_line("calculator", 1, 1, 4), _dump_line("calculator", 1, 2, 6), _dump_line("calculator", 0, 0, 2),
             _dump_line("none", 0, 0, 2), _dump_line("none", 1, 0, 2)]
    dump = tmp_path / "0.jsonl"
    dump.write_text("".join(json.dumps(line) + "\n" for line in lines))
    parts = validation_scores.summaries(dump)
    on, off = parts["calculator"], parts["none"]
    assert (on["answers"], on["strict_acc"], on["tool_call_rate"], on["tool_calls_per_answer"], on["turns_mean"]) == (
        3, 2 / 3, 2 / 3, 1.0, 4.0)
    assert (off["answers"], off["strict_acc"], off["tool_call_rate"], off["turns_mean"]) == (2, 0.5, 0.0, 2.0)
    metrics = {"val-core/openai/gsm8k/acc/mean@1": 2 / 3, "val-aux/openai/gsm8k/called_tool/mean@1": 2 / 3,
               "val-aux/openai/gsm8k/num_tool_calls/mean@1": 1.0, "val-aux/openai/gsm8k/turns/mean@1": 4.0,
               "val-core/openai/gsm8k_no_tools/acc/mean@1": 0.5,
               "val-aux/openai/gsm8k_no_tools/called_tool/mean@1": 0.0,
               "val-aux/openai/gsm8k_no_tools/num_tool_calls/mean@1": 0.0,
               "val-aux/openai/gsm8k_no_tools/turns/mean@1": 2.0}
    assert validation_scores.disagreements(parts, metrics) == []
    off_by_one = {**metrics, "val-core/openai/gsm8k_no_tools/acc/mean@1": 1.0}
    assert validation_scores.disagreements(parts, off_by_one) == [
        "none: acc 0.5000 from the dump, val-core/openai/gsm8k_no_tools/acc/mean@1 1.0000"]
    log = tmp_path / "metrics.jsonl"
    log.write_text(json.dumps({"step": 0, "data": metrics}) + "\n" + json.dumps({"step": 1, "data": {}}) + "\n")
    assert validation_scores.verl_metrics(log, 0) == metrics and validation_scores.verl_metrics(log, 5) == {}


def test_the_gpu_profile_learns_with_the_cpu_checks_sizes():
    """The GPU changes where the check runs, not what it learns: every learning size of cpu_learn is gpu_learn's."""
    from omegaconf import OmegaConf

    from recipes.preflight.compose import compose_config

    learning = ("actor_rollout_ref.actor.ppo_mini_batch_size", "actor_rollout_ref.actor.optim.lr",
                "actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype", "actor_rollout_ref.rollout.n",
                "actor_rollout_ref.rollout.multi_turn.max_assistant_turns", "data.train_batch_size",
                "data.max_prompt_length", "data.max_response_length", "actor_rollout_ref.actor.use_kl_loss",
                "algorithm.adv_estimator", "reward.custom_reward_function.reward_kwargs")
    cpu, gpu = (compose_config([f"profile={p}"]) for p in ("cpu_learn", "gpu_learn"))
    assert {k: OmegaConf.select(gpu, k) for k in learning} == {k: OmegaConf.select(cpu, k) for k in learning}
    assert (gpu.actor_rollout_ref.rollout.name, cpu.actor_rollout_ref.rollout.name) == ("sglang", "hf_cpu")
    assert (PROFILE_DIR / "gpu_learn.yaml").is_file()


@pytest.mark.parametrize("knobs, said", [
    ({"DEVICE": "tpu"}, "DEVICE must be gpu or cpu, not 'tpu'"),
    ({"GRPO_STEPS": "ten"}, "GRPO_STEPS must be a whole number of steps"),
    ({"DRY_RUN": "yes"}, "DRY_RUN must be 0 or 1, not 'yes'"),
    ({"PREPARE_ONLY": "2"}, "PREPARE_ONLY must be 0 or 1, not '2'"),
    ({"PREPARE_ONLY": "1", "DRY_RUN": "1"}, "PREPARE_ONLY=1 makes a prepared folder (and runs the launcher's DRY_RUN"),
    ({"PREPARED": "/nowhere", "SFT_MODEL": "/m"}, "PREPARED holds its own warm start: set PREPARED or SFT_MODEL"),
    ({"PREPARED": "/nowhere"}, "PREPARED=/nowhere is not a folder"),
    ({"PREPARED": "{work}"}, "WORK_DIR={work} is PREPARED={work} or inside it"),
])
def test_learn_gpu_refuses_a_knob_it_cannot_use_in_one_line_and_changes_nothing(tmp_path, knobs, said):
    from testkit.knob_refusal import EARLIER_RUN, run_refused

    proc, last, work = run_refused("learn_gpu.sh", tmp_path, knobs)
    assert proc.returncode == 1 and last.startswith(f"[learn_gpu] error: {said.format(work=work)}"), proc.stderr
    assert (work / EARLIER_RUN).exists() and [p.name for p in work.iterdir()] == [EARLIER_RUN]


def _pipeline(work, **knobs):
    from harness.learning.gpu_pipeline import GpuKnobs, GpuPipeline

    values = {f.upper(): "" for f in GpuKnobs.__dataclass_fields__} | {
        "PYTHON": sys.executable, "TASK": "one_step", "WORK_DIR": str(work), "SEED": "0", "GRPO_STEPS": "1",
        "DEVICE": "cpu", "DRY_RUN": "0", "PREPARE_ONLY": "0", "TEST_ROWS": "4"} | knobs
    fields = GpuKnobs.__dataclass_fields__
    return GpuPipeline(GpuKnobs(**{k.lower(): v for k, v in values.items() if k.lower() in fields}), [])


def test_the_launch_is_over_when_the_launcher_exits_even_if_a_process_it_started_keeps_its_output_open(
        tmp_path, monkeypatch, capsys):
    """A launcher whose child outlives it with the launcher's stdout (a Ray worker or SGLang's scheduler can): the
    check must not wait for the pipe's end. Its lines arrive, the launch ends within seconds of the launcher's exit,
    and the child that held the pipe is stopped."""
    import os
    import threading
    import time

    from harness.learning import gpu_pipeline

    root = tmp_path / "checkout"
    (root / "scripts").mkdir(parents=True)
    child_pid = tmp_path / "child.pid"
    # the launcher's stand-in: prints, leaves a child holding its stdout, and exits 0
    (root / "scripts" / "run_gsm8k_grpo.sh").write_text(
        f"echo 'step:1 - done'\nsleep 1000 &\necho $! > {child_pid}\necho 'launcher exiting'\nexit 0\n")
    monkeypatch.setattr(gpu_pipeline, "REPO_ROOT", root)
    pipeline = _pipeline(tmp_path / "work")
    (tmp_path / "work").mkdir()
    done = {}

    def launch():
        done["start"] = time.monotonic()
        pipeline.launch(tmp_path / "model", dry_run=False)
        done["end"] = time.monotonic()

    thread = threading.Thread(target=launch, daemon=True)
    thread.start()
    try:
        thread.join(timeout=30)
        assert not thread.is_alive(), "the launch still waits for the end of the launcher's output"
        assert done["end"] - done["start"] < 20
        pid = int(child_pid.read_text())
        stat = f"/proc/{pid}/stat"
        assert not os.path.exists(stat) or open(stat).read().rsplit(")", 1)[1].split()[0] == "Z", \
            "the child holding the launcher's output is still running"
    finally:
        if child_pid.is_file():
            try:
                os.kill(int(child_pid.read_text()), 9)
            except ProcessLookupError:
                pass
        thread.join(timeout=10)
    out = capsys.readouterr()
    assert "step:1 - done\n" in out.out and "launcher exiting\n" in out.out
    log = (tmp_path / "work" / "outputs" / "logs" / "train.log").read_text()
    assert log.startswith("step:1 - done\nlauncher exiting\n")


def _folder(tmp_path):
    """A folder as PREPARE_ONLY leaves one (its files' contents do not matter to the manifest), and its knobs."""
    from harness.learning import prepared

    folder = tmp_path / "prepared"
    (folder / "model_sft").mkdir(parents=True)
    (folder / "model_sft" / "model.safetensors").write_bytes(b"weights" * 100)
    (folder / "launch_config.yaml").write_text("data: {}\n")
    knobs = {name.upper(): "1" for name in prepared.MADE_WITH} | {"GRPO_STEPS": "20"}
    prepared.write_manifest(folder, knobs, {"sft_attempts": 1})
    return folder, knobs


def test_a_prepared_folder_is_read_only_when_its_manifest_recipe_knobs_and_files_all_match(tmp_path):
    from harness.learning import prepared

    folder, knobs = _folder(tmp_path)
    manifest = prepared.read(folder, knobs)
    assert manifest["recipe"] == prepared.recipe_version() and len(manifest["recipe"]) == 16
    assert sorted(manifest["files"]) == ["launch_config.yaml", "model_sft/model.safetensors"]
    assert manifest["made_with"] == {name.upper(): "1" for name in prepared.MADE_WITH}
    assert prepared.read(folder, {**knobs, "GRPO_STEPS": "5"})  # a knob of the launch, not of the folder

    def refused(change) -> str:
        copy = tmp_path / f"copy{len(list(tmp_path.iterdir()))}"
        shutil.copytree(folder, copy)
        change(copy)
        with pytest.raises(prepared.PreparedError) as err:
            prepared.read(copy, knobs)
        assert "\n" not in str(err.value)
        return str(err.value).replace(str(copy), "F")

    def edit_manifest(**changes):
        def change(copy):
            path = copy / prepared.MANIFEST
            path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))
        return change

    assert refused(lambda c: (c / "model_sft" / "model.safetensors").write_bytes(b"weights" * 99)) == (
        "PREPARED=F: model_sft/model.safetensors does not match its checksum in manifest.json (a partial or changed "
        "copy); copy the folder again")
    assert refused(lambda c: (c / "launch_config.yaml").unlink()).startswith(
        "PREPARED=F: launch_config.yaml is missing")
    assert refused(lambda c: (c / prepared.MANIFEST).unlink()).startswith("PREPARED=F has no manifest.json")
    assert refused(edit_manifest(recipe="0" * 16)).startswith(
        "PREPARED=F was made by another version of the learning recipe (recipe 0000000000000000, this checkout's ")
    assert refused(edit_manifest(format=0)).startswith("PREPARED=F: manifest.json is of format 0")
    assert refused(lambda c: (c / prepared.MANIFEST).write_text("{")).startswith(
        "PREPARED=F: manifest.json is not JSON")


def test_the_recipe_version_changes_with_the_code_that_makes_the_folder(monkeypatch, tmp_path):
    from harness.learning import prepared

    for name in prepared.RECIPE_FILES:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO_ROOT / name, tmp_path / name)
    monkeypatch.setattr(prepared, "REPO_ROOT", tmp_path)
    assert prepared.recipe_version() == prepared.recipe_version()
    before = prepared.recipe_version()
    with (tmp_path / "scripts/harness/learning/sft.py").open("a") as f:
        f.write("\n# another warm start\n")
    assert prepared.recipe_version() != before
