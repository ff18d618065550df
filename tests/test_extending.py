"""Extending the recipe as docs/how-to.md says, in a scratch copy of the repo: a new tool (one typed function with
verl's @function_tool and one tool-set YAML naming its file; the same tool as a class and its YAML), a new dataset
(one module) and a changed system prompt, each file exactly as the how-to prints it. Then the user's commands run in
the copy: the dataset's own data prep with the function's tool set, the launcher's dry run through
scripts/run_gsm8k_grpo.sh, and verl's real ToolAgentLoop in-process (the recipe's agent loop, a scripted LLM as the
model) calling the function, the reward scoring the trajectory through the new dataset's answer checker."""

import json
import os
import re
import shutil
import subprocess
import sys

import pyarrow.parquet as pq
import pytest
import yaml

from harness.standins.scripted_llm import tool_call
from recipes.constants import REPO_ROOT
from testkit.launcher import STAND_IN_WANDB_KEY, clean_environ

pytestmark = pytest.mark.integration

HOWTO = REPO_ROOT / "docs" / "how-to.md"
COPIED = ("recipes", "tools", "data_prep", "config", "scripts", "pyproject.toml")
# a fenced block of the how-to whose first line names the repo file it is: "# tools/x.py" or "# config/x/y.yaml"
FILE_BLOCK = re.compile(r"^```(?:python|yaml)\n# ((?:tools|data_prep|config)/[\w/]+\.(?:py|yaml))\n(.*?)^```",
                        re.M | re.S)
NEW_PROMPT = "You are a patient tutor for everyday word problems. Think step by step."
TRAIN_ROWS = 260  # a step of the default profile takes 256 prompts


def howto_files() -> dict[str, str]:
    return {path: f"# {path}\n{body}" for path, body in FILE_BLOCK.findall(HOWTO.read_text())}


def run(root, *command, env=None, timeout=240) -> subprocess.CompletedProcess:
    environ = clean_environ(PYTHONPATH=os.pathsep.join([str(root), str(root / "scripts"), str(REPO_ROOT / "tests")]),
                            **(env or {}))
    return subprocess.run([str(c) for c in command], cwd=root, env=environ, capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


@pytest.fixture(scope="module")
def extended(tmp_path_factory):
    """The copy, extended as the how-to says, with the new dataset's rows prepared for the new tool set."""
    root = tmp_path_factory.mktemp("extended")
    for name in COPIED:
        source = REPO_ROOT / name
        if source.is_dir():
            shutil.copytree(source, root / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(source, root / name)
    files = howto_files()
    assert {"tools/unit_converter.py", "config/tool_config/unit_converter.yaml", "tools/unit_converter_class.py",
            "config/tool_config/unit_converter_class.yaml", "data_prep/word_problems.py"} <= set(files), \
        f"docs/how-to.md shows no file block for: {sorted(files)}"
    for path, text in files.items():
        assert not (root / path).exists(), f"the how-to's {path} is already in the repo"
        (root / path).write_text(text)
    prompt_file = root / "config" / "system_prompt.yaml"  # the how-to's third change: the prompt, in its one file
    prompt = yaml.safe_load(prompt_file.read_text())
    prompt_file.write_text(yaml.safe_dump({**prompt, "before_tools": NEW_PROMPT}))

    raw, data = root / "raw", root / "data"
    raw.mkdir()
    rows = {"train": [{"question": f"A job takes {k} hours. How many minutes is that?", "answer": 60 * k}
                      for k in range(1, TRAIN_ROWS + 1)],
            "test": [{"question": "A movie lasts 2.5 hours. How many minutes is that?", "answer": 150},
                     {"question": "Ten dollars are shared by three friends. How many dollars does each get?",
                      "answer": 3.33333333}]}
    for split, records in rows.items():
        (raw / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    # the user's data prep command, then the rollout, in one process (verl imported once)
    prepare = ["data_prep/word_problems.py", "--input_dir", str(raw), "--local_save_dir", str(data),
               "--tool_set", "unit_converter"]
    turns = [tool_call("unit_converter", value="2.5", from_unit="hour", to_unit="minute"),
             "2.5 hours are 150 minutes.\n#### 150"]
    near = ["Each gets 3.3333 dollars.\n#### 3.3333", "3.33333333"]
    scores = [["example/word_problems", *near], ["openai/gsm8k", *near], ["example/other", "#### 1", "1"]]
    proc = run(root, sys.executable, "-m", "testkit.extension_rollout", "--prepare", json.dumps(prepare),
               "--data_file", data / "test.parquet", "--tool_set", "unit_converter", "--turns", json.dumps(turns),
               *[arg for score in scores for arg in ("--score", json.dumps(score))])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return root, data, json.loads(proc.stdout.strip().splitlines()[-1])


def test_the_new_tool_set_is_a_data_prep_choice(extended):
    root, _, _ = extended
    proc = run(root, sys.executable, "data_prep/gsm8k.py", "--help")
    assert proc.returncode == 0, proc.stderr
    assert re.search(r"--tool_set \{[^}]*\bunit_converter\b", proc.stdout), proc.stdout
    assert "a unit converter (time, money, length)" in " ".join(proc.stdout.split())  # its YAML's description


def test_the_new_datasets_rows_offer_the_new_tool_with_the_new_prompt(extended):
    _, data, _ = extended
    row = pq.read_table(data / "test.parquet").to_pylist()[0]
    assert row["data_source"] == "example/word_problems"
    assert row["extra_info"]["tools_kwargs"] == {"unit_converter": {"create_kwargs": {"row_index": 0}}}
    system = row["prompt"][0]["content"]
    # the config's parts, and the tool's sentence built from its schema (the class sets no PROMPT)
    assert system.startswith(NEW_PROMPT + " You can call the `unit_converter` tool: Convert a quantity between units")
    assert system.endswith("`#### <number>`.")


def test_the_launchers_dry_run_takes_the_new_tool_set_and_data(extended, tmp_path):
    root, data, _ = extended
    proc = run(root, "bash", "scripts/run_gsm8k_grpo.sh",
               env={"PYTHON": sys.executable, "DRY_RUN": "1", "TOOL_SET": "unit_converter", "DATA_DIR": str(data),
                    "EXPERIMENT_NAME": "word_problems_unit_converter", "TMPDIR": str(tmp_path),
                    "WANDB_API_KEY": STAND_IN_WANDB_KEY})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "[preflight] ok" in proc.stderr, proc.stderr
    plan = proc.stdout + proc.stderr
    # the set's YAML and the function it names, as the plan's tools row says, and as main_ppo is told
    assert re.search(rf"tools\s+unit_converter \({root}/config/tool_config/unit_converter\.yaml\) and the functions "
                     rf"unit_converter \({root}/tools/unit_converter\.py\)", plan), plan
    assert f"actor_rollout_ref.rollout.multi_turn.function_tool_path={root}/tools/unit_converter.py" in proc.stdout
    assert f"train {data}/train.parquet" in plan
    assert "system prompt" not in plan  # the data is the prompt's current one: no stale-prompt warning


def test_verls_agent_loop_calls_the_new_tool_and_the_reward_scores_the_new_dataset(extended):
    root, _, got = extended
    assert got["repo_root"] == str(root) and got["tool_config"].startswith(str(root))  # the copy, not the repo
    assert got["tools"] == ["unit_converter"] and got["tool_kind"] == "FunctionTool"  # the how-to's function
    assert len(got["tool_turns"]) == 1 and "150" in got["tool_turns"][0]  # the tool answered the model's call
    assert got["reward_score"] == 1.0
    assert got["reward"] == {"acc": 1.0, "acc_strict": 1.0, "num_tool_calls": 1, "pred": "150"}
    assert got["calls_counted_without_the_row"] == [1, 0]  # a tool of any tool set counts when re-scored offline
    # the new dataset's checker (within 0.01%) for its rows, GSM8K's (exact) for GSM8K's
    assert got["scores"][:2] == [1.0, 0.0]


def test_a_data_source_no_dataset_declares_is_one_clear_error(extended):
    error = extended[2]["scores"][2]
    assert error.startswith("UnknownDataSource: no dataset declares data_source 'example/other'"), error
    assert "example/word_problems" in error and "openai/gsm8k" in error and "data_prep/" in error
    assert "\n" not in error


def test_the_class_form_of_the_tool_is_a_tool_set_of_its_own(extended):
    """The how-to's class for the same tool loads through verl's registry beside the function, in one process (a
    class never imports the function's file, which verl registers once)."""
    _, _, got = extended
    assert got["tool_sets"]["unit_converter_class"] == ["unit_converter"]
    assert got["tool_sets"]["unit_converter"] == ["unit_converter"] and got["tool_sets"]["none"] == []
