"""scripts/run_gsm8k_grpo.sh as users run it: DRY_RUN for every profile, and every way a launch must refuse.

A launch-mode call here must always fail its preflight (nothing may start): each sets up one problem."""

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from data_prep import gsm8k

REPO_ROOT = Path(__file__).resolve().parents[1]
PROFILES = sorted(p.stem for p in (REPO_ROOT / "config" / "profiles").glob("*.env"))


@pytest.fixture(scope="module")
def data_dir(mini_gsm8k_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("gsm8k")
    assert gsm8k.main(["--input_dir", str(mini_gsm8k_dir), "--local_save_dir", str(out)]) == 0
    return out


def launch(data_dir, *args, **env):
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("WANDB_API_KEY", "PREFLIGHT_"))}
    full_env.update({"PYTHON": sys.executable, "DATA_DIR": str(data_dir), **env})
    return subprocess.run(["bash", str(REPO_ROOT / "scripts" / "run_gsm8k_grpo.sh"), *args], env=full_env,
                          capture_output=True, text=True, timeout=180)


def printed_command(stdout: str) -> list[str]:
    return shlex.split(stdout.strip().splitlines()[-1])


def test_profiles_cover_what_users_need():
    assert set(PROFILES) == {"8xh100", "4gpu", "1gpu_smoke", "lora", "multinode"}


@pytest.mark.parametrize("profile", PROFILES)
def test_every_profile_dry_runs(data_dir, profile):
    proc = launch(data_dir, PROFILE=profile, DRY_RUN="1")
    assert proc.returncode == 0, proc.stderr
    assert "[preflight] ok" in proc.stderr
    command = printed_command(proc.stdout)
    assert command[1:3] == ["-m", "verl.trainer.main_ppo"]
    assert "--config-name=gsm8k_multiturn_grpo" in command
    # every override names a key of verl 0.9.1's schema: none needs hydra's `+` to be accepted
    assert not [arg for arg in command if arg.startswith("+")]
    assert "trainer.use_v1=False" in command
    assert "actor_rollout_ref.model.lora_rank=" + ("64" if profile == "lora" else "0") in command
    if profile == "1gpu_smoke":  # the smoke test runs without W&B
        assert "actor_rollout_ref.rollout.trace.backend=null" in command and "trainer.total_training_steps=2" in command
    else:
        assert "actor_rollout_ref.rollout.trace.backend=weave" in command
    # the composed config is printed too, as YAML
    assert "adv_estimator: grpo" in proc.stdout


def test_default_launch_is_the_recipe(data_dir):
    proc = launch(data_dir, DRY_RUN="1")
    command = printed_command(proc.stdout)
    for expected in ("actor_rollout_ref.rollout.n=16", "data.train_batch_size=256",
                     f"actor_rollout_ref.rollout.multi_turn.tool_config_path={REPO_ROOT}/config/tool_config/calculator.yaml",
                     f"reward.custom_reward_function.path={REPO_ROOT}/recipes/reward.py",
                     "trainer.n_gpus_per_node=8", "actor_rollout_ref.rollout.tensor_model_parallel_size=2"):
        assert expected in command
    assert "max_samples_per_step_per_worker: 2" in proc.stdout and "token2text: true" in proc.stdout


def test_user_overrides_pass_through_and_stale_keys_warn(data_dir):
    proc = launch(data_dir, "+trainer.rollout_trace.backend=weave", "trainer.total_epochs=1", DRY_RUN="1")
    assert proc.returncode == 0, proc.stderr
    assert "WARNING: '+trainer.rollout_trace.backend=weave'" in proc.stderr
    assert "use actor_rollout_ref.rollout.trace.*" in proc.stderr
    command = printed_command(proc.stdout)
    assert command[-2:] == ["+trainer.rollout_trace.backend=weave", "trainer.total_epochs=1"]


@pytest.mark.parametrize(
    "args, env, message",
    [
        ((), {"DATA_DIR": "/nonexistent/gsm8k"}, "data.train_files: /nonexistent/gsm8k/train.parquet not found"),
        ((), {"TOOL_SET": "calc_gsm8k_reward"}, "rows were prepared for tool set 'calculator'"),
        (("trainer.use_v1=True",), {}, "V1 trainer never traces agent loops"),
        (("actor_rollout_ref.rollout.trace.max_samples_per_step_per_worker=0",), {}, "records nothing"),
        (("trainer.no_such_key=1",), {}, "the config does not compose"),
        (("actor_rollout_ref.actor.ppo_mini_batch_size=300",), {}, "verl rejects the config: ValueError: train_batch_size"),
        ((), {"PROFILE": "16xh100"}, "unknown PROFILE=16xh100"),
        ((), {"TRACE": "maybe"}, "TRACE must be on or off"),
    ],
)
def test_dry_run_refuses_what_would_fail(data_dir, args, env, message):
    proc = launch(data_dir, *args, DRY_RUN="1", **env)
    assert proc.returncode != 0
    assert message in proc.stderr, proc.stderr
    assert "would run" not in proc.stdout


@pytest.mark.parametrize(
    "env, message",
    [
        ({"PREFLIGHT_VISIBLE_GPUS": "4", "WANDB_API_KEY": "x" * 40}, "4 GPU(s) visible but trainer.n_gpus_per_node=8"),
        ({"PREFLIGHT_VISIBLE_GPUS": "8", "HOME": "/nonexistent"}, "need W&B credentials: export WANDB_API_KEY"),
    ],
)
def test_a_real_launch_stops_before_any_gpu_work(data_dir, env, message):
    proc = launch(data_dir, **env)
    assert proc.returncode == 1
    assert message in proc.stderr and "nothing was started" in proc.stderr
    assert "ray init" not in proc.stdout + proc.stderr  # main_ppo never ran


def test_multinode_submission_needs_a_cluster_address(data_dir):
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env.update({"PYTHON": sys.executable, "DATA_DIR": str(data_dir)})
    proc = subprocess.run(["bash", str(REPO_ROOT / "scripts" / "submit_multinode.sh")], env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0 and "set RAY_ADDRESS to the Ray dashboard address" in proc.stderr
