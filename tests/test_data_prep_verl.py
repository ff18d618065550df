"""Our parquet through verl's own RLHFDataset, collate_fn and DataProto, with a real Qwen2.5 tokenizer, and the data
prep as users type it (`python data_prep/gsm8k.py`, a process of its own; its options and errors in-process:
tests/test_data_prep_cli.py).

The dataset config is the recipe's (its YAML over verl's ppo_trainer, composed as a launch does), pointed at
our tool YAML, so the length filter counts the tool schemas in the system prompt exactly as training will (verl's
filter runs in a process pool).
"""

import json
import subprocess
import sys
from collections import Counter

import pyarrow.parquet as pq
import pytest

from data_prep import gsm8k
from harness.agent_loop_inprocess import compose_trainer_config
from harness.qwen_tokenizer import load_qwen25_tokenizer
from recipes.constants import AGENT_NAME
from recipes.gsm8k.tool_sets import get_tool_set
from tools.gsm8k_reward_tool import NAME as CALC_GSM8K_REWARD

pytestmark = pytest.mark.integration


def verl_data_config(tool_set_name: str):
    data = compose_trainer_config(tool_set_name).data
    assert data.filter_overlong_prompts  # the recipe's setting the checks below rely on
    return data


@pytest.fixture(scope="module")
def tokenizer():
    return load_qwen25_tokenizer()


def load_rlhf_dataset(paths, tokenizer, data_config):
    from verl.utils.dataset.rl_dataset import RLHFDataset

    return RLHFDataset(data_files=[str(p) for p in paths], tokenizer=tokenizer, config=data_config)


# RLHFDataset hashes its filter closure (tokenizer included) for datasets' cache: ~15 s per dataset on
# 2 cores. So the checks below share two datasets rather than building one each.


def test_real_gsm8k_loads_and_no_prompt_is_filtered(shared_gsm8k_dir, tmp_path, tokenizer):
    assert gsm8k.main(["--input_dir", str(shared_gsm8k_dir), "--local_save_dir", str(tmp_path),
                       "--tool_set", "both"]) == 0
    dataset = load_rlhf_dataset([tmp_path / "train.parquet", tmp_path / "test.parquet"], tokenizer,
                                verl_data_config("both"))
    # the tool schemas were loaded from our YAML, so the filter measured the prompt training will see
    assert [s["function"]["name"] for s in dataset.tool_schemas] == list(get_tool_set("both").tools)
    kept = Counter(info["split"] for info in dataset.dataframe["extra_info"])
    assert kept == {"train": 7473, "test": 1319}, "prompts over data.max_prompt_length tokens were dropped"


@pytest.fixture(scope="module")
def mini_dataset_with_a_long_row(mini_gsm8k_dir, tmp_path_factory, tokenizer):
    """Our fixture rows plus one question far over max_prompt_length, through verl's RLHFDataset."""
    src, out = tmp_path_factory.mktemp("src"), tmp_path_factory.mktemp("out")
    for split in ("train", "test"):
        (src / f"{split}.jsonl").write_text((mini_gsm8k_dir / f"{split}.jsonl").read_text())
    too_long = {"question": "How many? " + "apples and pears " * 400, "answer": "#### 5"}
    with (src / "train.jsonl").open("a") as f:
        f.write(json.dumps(too_long) + "\n")
    assert gsm8k.main(["--input_dir", str(src), "--local_save_dir", str(out), "--tool_set", "both"]) == 0
    return load_rlhf_dataset([out / "train.parquet"], tokenizer, verl_data_config("both"))


def test_the_length_filter_drops_only_the_long_row(mini_dataset_with_a_long_row):
    """The no-drop check above means something only if verl's filter really measures our prompts."""
    indices = [info["index"] for info in mini_dataset_with_a_long_row.dataframe["extra_info"]]
    assert indices == list(range(10))  # row 10, the long one, is gone


def test_batch_carries_tools_kwargs_and_agent_name(mini_dataset_with_a_long_row):
    from verl.protocol import DataProto
    from verl.utils.dataset.rl_dataset import collate_fn

    dataset = mini_dataset_with_a_long_row
    batch = DataProto.from_single_dict(collate_fn([dataset[i] for i in range(4)]))
    nt = batch.non_tensor_batch
    assert list(nt["agent_name"]) == [AGENT_NAME] * 4
    assert list(nt["index"]) == [0, 1, 2, 3]
    tool_set = get_tool_set("both")
    for i, (kwargs, reward_model) in enumerate(zip(nt["tools_kwargs"], nt["reward_model"], strict=True)):
        assert kwargs == tool_set.tools_kwargs(reward_model["ground_truth"], i)
    assert nt["raw_prompt"][0][0] == {"role": "system", "content": tool_set.system_prompt}


def test_cli_as_users_run_it(mini_gsm8k_dir, tmp_path, repo_root):
    """As a script from the repo root, with verl's older --local_dir alias and a subset."""
    proc = subprocess.run(
        [sys.executable, "data_prep/gsm8k.py", "--input_dir", str(mini_gsm8k_dir), "--local_dir", str(tmp_path),
         "--train_size", "3", "--tool_set", CALC_GSM8K_REWARD],
        cwd=repo_root, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "deprecated" in proc.stdout and "train: 3 rows" in proc.stdout
    rows = pq.read_table(tmp_path / "train.parquet").to_pylist()
    assert len(rows) == 3 and len(pq.read_table(tmp_path / "test.parquet")) == 4
    assert rows[0]["prompt"][0]["content"] == get_tool_set(CALC_GSM8K_REWARD).system_prompt
    assert (tmp_path / "train.parquet").stat().st_mode & 0o044  # readable by others, not mkstemp's 0600
