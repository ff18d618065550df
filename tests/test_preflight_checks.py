"""The preflight's checks for defects a GPU run would hit late: LoRA's first weight sync, rollout concurrency,
checkpoints filling the disk, multi-node outputs in per-node temp dirs, W&B credentials on self-hosted W&B.
Each composes the recipe's real config (hydra, as the launcher does) and runs the check on it."""

import pytest

from harness.qwen_tokenizer import build_tiny_qwen2_model_dir
from recipes.config_view import ConfigView
from recipes.credentials import wandb_api_key
from recipes.models import resolve_model
from recipes.preflight.checks import check_cpu_rollout, check_model
from recipes.preflight.compose import compose_config
from recipes.preflight.findings import Report
from recipes.preflight.rollout_checks import check_lora_with_sglang, check_rollout_concurrency, check_tool_timeout
from recipes.preflight.storage import (
    check_checkpoint_space,
    check_shared_outputs,
    expected_saves,
    filesystem_type,
    model_parameter_count,
)

pytestmark = pytest.mark.unit


def run(check, *overrides, **kw) -> Report:
    report = Report()
    check(compose_config(list(overrides)), report, **kw)
    return report


def run_on_view(check, *overrides, **kw) -> Report:
    report = Report()
    check(ConfigView.of(compose_config(list(overrides))), report, **kw)
    return report


def test_lora_without_merge_is_refused_for_sglang_and_the_lora_profile_merges():
    assert "lora.merge=True" in run_on_view(check_lora_with_sglang, "actor_rollout_ref.model.lora_rank=64").errors[0]
    assert "lora.merge=True" in run_on_view(check_lora_with_sglang, "actor_rollout_ref.model.lora.rank=8").errors[0]
    assert run_on_view(check_lora_with_sglang, "profile=lora").errors == []
    assert run_on_view(check_lora_with_sglang).errors == []  # no LoRA, nothing to say


@pytest.mark.parametrize("profile", ["8xh100", "4gpu", "multinode", "1gpu_smoke"])
def test_every_profile_runs_all_trajectories_of_a_step_at_once(profile):
    assert run_on_view(check_rollout_concurrency, f"profile={profile}").warnings == []


def test_too_few_engine_slots_are_reported_with_the_value_that_fits():
    (warning,) = run_on_view(check_rollout_concurrency, "actor_rollout_ref.rollout.tensor_model_parallel_size=2",
                             "actor_rollout_ref.rollout.max_num_seqs=256").warnings
    assert warning.startswith("only 1024 of the 4096 trajectories") and "max_num_seqs=1024" in warning


@pytest.mark.parametrize("value, ok", [("0.5", True), ("null", True), ("0", False), ("soon", False)])
def test_a_tool_calls_bound_is_a_positive_number_of_seconds_or_null(value, ok):
    errors = run(check_tool_timeout, f"actor_rollout_ref.rollout.custom.tool_timeout_s={value}").errors
    assert errors == [] if ok else errors[0].startswith("actor_rollout_ref.rollout.custom.tool_timeout_s must be a "
                                                        "positive number of seconds or null"), errors


def test_checkpoints_are_pruned_by_default_and_counted_from_the_data():
    view = ConfigView.of(compose_config([]))
    assert view.max_ckpt_to_keep == 2
    assert expected_saves(view, steps=435) == 2
    unpruned = ConfigView.of(compose_config(["trainer.max_actor_ckpt_to_keep=null"]))
    assert expected_saves(unpruned, steps=435) == 22  # 29 steps x 15 epochs = 435 steps, a save every 20


def test_the_disk_warning_names_free_space_and_need(tmp_path):
    ckpt = f"trainer.default_local_dir={tmp_path}/run/checkpoints"
    view, model = ConfigView.of(compose_config([ckpt])), resolve_model("Qwen/Qwen2.5-3B-Instruct")
    far, small = Report(), Report()
    check_checkpoint_space(view, 435, model, far, params=10**15)  # far beyond any disk
    (warning,) = far.warnings
    assert f"{tmp_path}" in warning and "2 checkpoint(s)" in warning and "max_actor_ckpt_to_keep" in warning
    check_checkpoint_space(view, 435, model, small, params=1000)
    assert small.warnings == []


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    """The CPU smoke's model folder (scripts/harness/qwen_tokenizer.py), written as the smoke writes it."""
    return build_tiny_qwen2_model_dir(tmp_path_factory.mktemp("preflight") / "tiny")


def test_parameters_are_counted_from_the_local_safetensors(tiny_model):
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32)
    expected = sum(p.numel() for p in model.parameters())
    assert model_parameter_count(resolve_model(str(tiny_model))) == expected
    assert model_parameter_count(resolve_model("no-such-org/no-such-model")) is None


def _tokenizer_warnings(folder) -> list[str]:
    """What transformers logs while loading the folder's tokenizer, as every agent-loop worker and SGLang do."""
    import logging

    from transformers import AutoTokenizer

    records: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: records.append(record.getMessage())
    logger = logging.getLogger("transformers")
    logger.addHandler(handler)
    try:
        AutoTokenizer.from_pretrained(str(folder))
    finally:
        logger.removeHandler(handler)
    return [r for r in records if "incorrect regex pattern" in r]


def test_a_model_folder_without_transformers_version_is_flagged_before_transformers_warns_falsely(tiny_model,
                                                                                                   tmp_path):
    """transformers 5.9 takes a local folder whose config.json lacks `transformers_version` for a Mistral one and
    warns, in every worker, of incorrect tokenization; the preflight names the file and the field to add."""
    import json
    import shutil

    from testkit.model_folder import assert_carries_transformers_version

    assert_carries_transformers_version(tiny_model)  # the smoke's model, as the recipe writes it
    check_model(resolve_model(str(tiny_model)), clean := Report())
    assert clean.warnings == []
    assert _tokenizer_warnings(tiny_model) == []

    converted = tmp_path / "converted"  # a user's own folder, written by a tool that leaves the field out
    shutil.copytree(tiny_model, converted)
    config = json.loads((converted / "config.json").read_text())
    del config["transformers_version"]
    (converted / "config.json").write_text(json.dumps(config))
    check_model(resolve_model(str(converted)), flagged := Report())
    (warning,) = flagged.warnings
    assert str(converted / "config.json") in warning and '"transformers_version": "' in warning
    assert len(_tokenizer_warnings(converted)) == 1  # the warning the preflight foretells is real


def test_several_nodes_need_outputs_on_shared_storage(tmp_path, repo_root):
    inside = run(check_shared_outputs, "trainer.nnodes=2", f"trainer.default_local_dir={repo_root}/outputs/x")
    relative = run(check_shared_outputs, "trainer.nnodes=2", "trainer.default_local_dir=outputs/x")
    assert "inside the repo or Ray's temp dir" in inside.errors[0] and "is relative" in relative.errors[0]
    single = run(check_shared_outputs, "trainer.nnodes=1", "trainer.default_local_dir=outputs/x")
    assert single.errors == [] and single.warnings == []


def test_the_filesystem_type_comes_from_the_longest_mount(tmp_path):
    mounts = tmp_path / "mounts"
    mounts.write_text("/dev/vda / ext4 rw 0 0\nserver:/export /mnt/shared nfs4 rw 0 0\n")
    assert filesystem_type(tmp_path / "nowhere", str(mounts)) == "ext4"
    assert filesystem_type(__import__("pathlib").Path("/mnt/shared/run/ckpt"), str(mounts)) == "nfs4"


def test_wandb_credentials_are_read_for_the_host_weave_will_use(tmp_path):
    netrc = tmp_path / ".netrc"
    netrc.write_text("machine wandb.example.com\n  login user\n  password self-hosted-key\n")
    netrc.chmod(0o600)
    env = {"HOME": str(tmp_path), "WANDB_BASE_URL": "https://wandb.example.com"}
    assert wandb_api_key(env) == "self-hosted-key"
    assert wandb_api_key({"HOME": str(tmp_path)}) is None  # api.wandb.ai has no entry
    assert wandb_api_key({**env, "WANDB_API_KEY": "from-env"}) == "from-env"


def test_the_cpu_platform_needs_the_cpu_rollout(monkeypatch):
    """DEVICE=cpu with a GPU profile (SGLang) would fail inside Ray minutes later: refused up front."""
    monkeypatch.setenv("VERL_PLATFORM", "cpu")
    assert "VERL_PLATFORM=cpu (DEVICE=cpu, smoke_cpu.sh) runs the rollout hf_cpu only, but " \
        "actor_rollout_ref.rollout.name=sglang" in run(check_cpu_rollout).errors[0]
    assert not run(check_cpu_rollout, "profile=cpu_smoke").errors
    monkeypatch.delenv("VERL_PLATFORM")
    assert not run(check_cpu_rollout).errors


def test_rows_of_a_dataset_the_reward_knows_on_the_current_prompt_pass_and_others_are_named(tmp_path):
    """What made a file's rows (recipes/preflight/row_origin.py): a data_source no dataset module declares is refused
    (the reward would stop the run at its first rollout); rows prepared on another system prompt than
    config/system_prompt.yaml gives their tool set now are warned about."""
    from data_prep.gsm8k_rows import SourceRecord, build_row
    from recipes.gsm8k.tool_sets import get_tool_set
    from recipes.preflight.row_origin import RECIPE_REWARD, check_row_origin

    config = compose_config([f"reward.custom_reward_function.path={RECIPE_REWARD}"])
    row = build_row(SourceRecord("How many?", "#### 72", "t", 0), "train", get_tool_set("calculator"))

    def check(changed: dict, on=config) -> Report:
        report = Report()
        check_row_origin(on, tmp_path / "train.parquet", {**row, **changed}, report)
        return report

    assert (check({}).errors, check({}).warnings) == ([], [])
    (error,) = check({"data_source": "example/other"}).errors
    assert "no dataset declares data_source 'example/other'" in error and "data_prep/" in error
    assert check({"data_source": "example/other"}, compose_config([])).errors == []  # another reward: its business
    old_prompt = [{"role": "system", "content": "You are a tutor."}, row["prompt"][1]]
    (warning,) = check({"prompt": old_prompt}).warnings
    assert "system prompt" in warning and "config/system_prompt.yaml" in warning and "'calculator'" in warning
