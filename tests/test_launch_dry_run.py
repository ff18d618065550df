"""scripts/run_gsm8k_grpo.sh as users run it: DRY_RUN for every profile, and every way a launch must refuse.

A launch-mode call here must always fail its preflight (nothing may start): each sets up one problem."""

import os
import shlex
import subprocess
import sys

import pytest

from recipes.constants import PROFILE_DIR, REPO_ROOT
from recipes.launch import ray_job
from testkit.launcher import (
    launch,
    load_script,
    override_dict,
    plan_line,
    printed_command,
    printed_overrides,
    run_script,
    written_config,
)

PROFILES = sorted(p.stem for p in PROFILE_DIR.glob("*.yaml"))
DEFAULT_PROFILE = "8xh100"  # scripts/run_gsm8k_grpo.sh's PROFILE default: the conftest's default_dry_run


SUBMITTER_KNOBS = {"OUTPUT_DIR": "/shared/runs/x", "DRY_RUN": "1", "PUBLISH_EVALS": "1", "EXPERIMENT_NAME": "exp1"}


@pytest.fixture(scope="module")
def submitted(prepared_data_dir):
    """A DRY_RUN of scripts/submit_multinode.sh with some launcher knobs set in the submitting shell."""
    proc = run_script("submit_multinode.sh", prepared_data_dir, "trainer.total_epochs=1",
                      RAY_ADDRESS="http://127.0.0.1:1", **SUBMITTER_KNOBS)
    assert proc.returncode == 0, proc.stderr
    return proc


@pytest.fixture(scope="module")
def multinode_dry_run(prepared_data_dir):
    """The same knobs and arguments, launched on this node with PROFILE=multinode."""
    proc = launch(prepared_data_dir, "trainer.total_epochs=1", PROFILE="multinode", **SUBMITTER_KNOBS)
    assert proc.returncode == 0, proc.stderr
    return proc


def test_profiles_cover_what_users_need():
    assert {"8xh100", "4gpu", "1gpu_smoke", "lora", "multinode"} <= set(PROFILES)


@pytest.mark.parametrize("profile", PROFILES)
def test_every_profile_dry_runs(prepared_data_dir, default_dry_run, request, profile):
    if profile == DEFAULT_PROFILE:
        proc = default_dry_run
    elif profile == "multinode":  # several nodes need shared outputs: that launch sets OUTPUT_DIR
        proc = request.getfixturevalue("multinode_dry_run")
    else:
        proc = launch(prepared_data_dir, PROFILE=profile, DRY_RUN="1")
    assert proc.returncode == 0, proc.stderr
    assert "[preflight] ok" in proc.stderr
    command = printed_command(proc.stdout)
    assert command[1:3] == ["-m", "verl.trainer.main_ppo"]
    assert "--config-name=gsm8k_multiturn_grpo" in command and f"profile={profile}" in command
    # every override names a key of verl 0.9.1's schema: none needs hydra's `+` to be accepted
    assert not [arg for arg in command if arg.startswith("+")]
    # the console gets the plan; the composed config goes to the file the plan names
    assert "adv_estimator: grpo" in written_config(proc.stdout) and "adv_estimator" not in proc.stdout
    assert len(proc.stdout.splitlines()) <= 16, proc.stdout


def test_default_launch_is_the_recipe(default_dry_run):
    proc = default_dry_run
    overrides = override_dict(printed_overrides(proc.stdout))
    assert overrides["actor_rollout_ref.rollout.multi_turn.tool_config_path"] == \
        f"{REPO_ROOT}/config/tool_config/calculator.yaml"
    assert overrides["reward.custom_reward_function.path"] == f"{REPO_ROOT}/recipes/reward.py"
    assert overrides["trainer.default_local_dir"] == f"{REPO_ROOT}/outputs/gsm8k_calculator_8xh100/checkpoints"
    # the recipe's values come from its YAML, not from the launcher
    assert "actor_rollout_ref.rollout.n" not in overrides and "data.train_batch_size" not in overrides
    config = written_config(proc.stdout)
    for line in ("'n': 16", "train_batch_size: 256", "tensor_model_parallel_size: 1", "max_num_seqs: 512",
                 "max_actor_ckpt_to_keep: 2", "max_samples_per_step_per_worker: 1", "num_workers: 16",
                 "token2text: true"):
        assert line in config


def test_the_dry_run_plan_says_what_the_launch_would_do(default_dry_run, prepared_data_dir):
    out = default_dry_run.stdout
    assert "(profile 8xh100)" in out.splitlines()[0]
    assert plan_line(out, "model") == "Qwen/Qwen2.5-3B-Instruct"
    assert plan_line(out, "data") == \
        f"train {prepared_data_dir}/train.parquet, validation {prepared_data_dir}/test.parquet"
    tool_file = f"{REPO_ROOT}/config/tool_config/calculator.yaml"
    assert plan_line(out, "tools") == f"calculator ({tool_file}), at most 5 assistant turns"
    assert plan_line(out, "hardware").startswith("1 node(s) x 8 GPU(s); rollout sglang, TP 1: 8 engine(s)")
    assert plan_line(out, "batch").startswith("256 prompts x 16 samples = 4096 trajectories per step")
    assert plan_line(out, "tracing").startswith("weave, 1 prompt(s) per agent-loop worker per step")
    assert plan_line(out, "outputs").startswith(f"{REPO_ROOT}/outputs/gsm8k_calculator_8xh100 (checkpoints/")
    # why verl's deprecated trainer: said once, where verl's own warning would otherwise puzzle
    assert plan_line(out, "trainer").startswith("legacy (trainer.use_v1=false), on purpose: verl 0.9.1's V1 trainer")


def test_a_launch_says_why_it_uses_the_legacy_trainer(preflight_script, launcher_overrides, capsys):
    assert preflight_script.main(["--", *launcher_overrides]) == 0
    err = capsys.readouterr().err
    assert "[launch] trainer: legacy (trainer.use_v1=false), on purpose" in err
    assert "Disabled critic" not in err  # GRPO's critic is off in the config, not inferred with a warning


def test_user_overrides_pass_through_and_stale_keys_warn(prepared_data_dir):
    proc = launch(prepared_data_dir, "+trainer.rollout_trace.backend=weave", "trainer.total_epochs=1", DRY_RUN="1")
    assert proc.returncode == 0, proc.stderr
    assert "WARNING: '+trainer.rollout_trace.backend=weave'" in proc.stderr
    assert "use actor_rollout_ref.rollout.trace.*" in proc.stderr
    assert printed_command(proc.stdout)[-2:] == ["+trainer.rollout_trace.backend=weave", "trainer.total_epochs=1"]


def test_publishing_evaluations_while_training_runs_a_watcher_beside_main_ppo(prepared_data_dir, default_dry_run,
                                                                             tmp_path):
    config = tmp_path / "dry" / "config.yaml"  # DRY_RUN_CONFIG: where the user wants the composed config
    # TP: a knob of a launcher before the first release; a shell that still sets it changes nothing
    proc = launch(prepared_data_dir, DRY_RUN="1", PUBLISH_EVALS="1", OUTPUT_DIR="/runs/a", DRY_RUN_CONFIG=str(config),
                  TP="2")
    assert proc.returncode == 0, proc.stderr
    assert "tensor_model_parallel_size" not in " ".join(printed_overrides(proc.stdout)) and "TP=2" not in proc.stderr
    assert plan_line(proc.stdout, "config") == f"{config} (the full composed config)"
    assert "default_local_dir: /runs/a/checkpoints" in config.read_text()
    watcher = next(line for line in proc.stdout.splitlines() if line.startswith("# and beside it:"))
    assert "publish_evals.py --validation_dir /runs/a/validation" in watcher
    assert "--watch --stop_when_pid_exits" in watcher
    assert "# and beside it" not in default_dry_run.stdout  # off by default


def test_rollout_concurrency_below_a_step_is_warned(preflight_script, launcher_overrides, capsys):
    """TP=2 halves the engines: half the trajectories of a step wait (the arithmetic is the preflight's)."""
    tp2 = "actor_rollout_ref.rollout.tensor_model_parallel_size=2"
    assert preflight_script.main(["--", *launcher_overrides, tp2]) == 0
    assert "only 2048 of the 4096 trajectories of a step can run at once" in capsys.readouterr().err


@pytest.mark.parametrize(
    "args, env, message",
    [
        ((), {"DATA_DIR": "/nonexistent/gsm8k"}, "data.train_files: /nonexistent/gsm8k/train.parquet not found"),
        ((), {"TOOL_SET": "calc_gsm8k_reward"}, "rows were prepared for tool set 'calculator'"),
        ((), {"PROFILE": "multinode"}, "is inside the repo or Ray's temp dir"),
        (("trainer.use_v1=True",), {}, "V1 trainer never traces agent loops"),
        ((), {"PROFILE": "16xh100"}, "unknown PROFILE=16xh100"),
        ((), {"TRACE": "maybe"}, "TRACE must be on or off"),
        ((), {"TOOL_SET": "calculater"},
         "unknown TOOL_SET=calculater; choose one of: both calc_gsm8k_reward calculator none"),
        ((), {"MODEL_PATH": "/nonexistent/models/Qwen2.5-3B-Instruct"},
         "actor_rollout_ref.model.path: /nonexistent/models/Qwen2.5-3B-Instruct does not exist; set MODEL_PATH"),
    ],
)
def test_dry_run_refuses_what_would_fail(prepared_data_dir, args, env, message):
    proc = launch(prepared_data_dir, *args, DRY_RUN="1", **env)
    assert proc.returncode != 0
    assert message in proc.stderr, proc.stderr
    assert "would run" not in proc.stdout


@pytest.fixture(scope="module")
def preflight_script():
    return load_script("preflight")


@pytest.mark.parametrize(
    "override, message",
    [
        ("actor_rollout_ref.rollout.trace.max_samples_per_step_per_worker=0", "records nothing"),
        ("trainer.no_such_key=1", "the config does not compose"),
        ("actor_rollout_ref.actor.ppo_mini_batch_size=300", "verl rejects the config: ValueError: train_batch_size"),
        ("actor_rollout_ref.rollout.n=abc",  # verl's own error: a TypeError from string formatting
         "actor_rollout_ref.rollout.n='abc' is not a whole number (the recipe's value: 16); fix that override"),
        ("data.train_batch_size=2.5", "data.train_batch_size=2.5 is not a whole number (the recipe's value: 256)"),
        ("actor_rollout_ref.model.path=outputs/no_such_run/hf", "outputs/no_such_run/hf does not exist (relative to "),
        (f"actor_rollout_ref.model.path={REPO_ROOT / 'config'}", "has no config.json: not a Hugging Face model folder"),
        ("actor_rollout_ref.model.lora_rank=8",
         "LoRA with SGLang 0.5.12 needs actor_rollout_ref.model.lora.merge=True"),
        ("actor_rollout_ref.rollout.multi_turn.format=hermes_feedback", "is not a registered tool parser"),
    ],
)
def test_the_preflight_refuses_what_would_fail(preflight_script, launcher_overrides, capsys, override, message):
    """The launcher's preflight, in this process (the launcher runs above stop on its refusals): a default
    launch's overrides with a user's override after them, as the launcher passes them."""
    assert preflight_script.main(["--", *launcher_overrides, override]) == 1
    err = capsys.readouterr().err
    assert message in err and "[preflight] ok" not in err, err


@pytest.mark.parametrize(
    "env, message",
    [
        ({"PREFLIGHT_VISIBLE_GPUS": "4", "WANDB_API_KEY": "x" * 40}, "4 GPU(s) visible but trainer.n_gpus_per_node=8"),
        ({"PREFLIGHT_VISIBLE_GPUS": "8", "HOME": "/nonexistent"}, "need W&B credentials: export WANDB_API_KEY"),
    ],
)
def test_a_real_launch_stops_before_any_gpu_work(prepared_data_dir, env, message):
    proc = launch(prepared_data_dir, **env)
    assert proc.returncode == 1
    assert message in proc.stderr and "nothing was started" in proc.stderr
    assert "ray init" not in proc.stdout + proc.stderr  # main_ppo never ran


def test_multinode_submission_needs_a_cluster_address(prepared_data_dir):
    proc = run_script("submit_multinode.sh", prepared_data_dir, timeout=60)
    assert proc.returncode != 0 and "set RAY_ADDRESS to the Ray dashboard address" in proc.stderr


def test_multinode_submission_resolves_the_same_knobs_with_repo_relative_paths(submitted, multinode_dry_run):
    local = multinode_dry_run
    assert "submitted as a Ray job" in submitted.stdout
    relative = [o.replace(f"={REPO_ROOT}/", "=./") for o in printed_overrides(local.stdout)]
    assert printed_overrides(submitted.stdout) == relative


def test_the_ray_job_reruns_the_launcher_with_the_submitters_knobs(submitted):
    """The job's entrypoint runs the launcher again on the cluster, in an environment without the submitting
    shell's knobs: what the submitter chose (watcher on, experiment, output dir) must still hold."""
    lines = submitted.stdout.splitlines()
    submit_command = shlex.split(lines[lines.index("# which runs on the cluster:") - 1])
    assert submit_command[1:3] == ["-m", "recipes.launch.ray_job"]
    args = ray_job.build_parser().parse_args(submit_command[3:])
    command = ray_job.entrypoint(args.overrides, ray_job.parse_knobs(args.knob))

    cluster_env = {"PATH": os.environ["PATH"], "HOME": os.environ["HOME"], "PYTHON": sys.executable, "DRY_RUN": "1"}
    job = subprocess.run(["bash", "-c", command], cwd=REPO_ROOT, env=cluster_env, capture_output=True, text=True,
                         timeout=180, stdin=subprocess.DEVNULL)
    assert job.returncode == 0, job.stderr
    assert printed_overrides(job.stdout) == printed_overrides(submitted.stdout)
    watcher = next(line for line in job.stdout.splitlines() if line.startswith("# and beside it:"))
    assert "--experiment exp1" in watcher and "--validation_dir /shared/runs/x/validation" in watcher
    assert "--tool_set calculator" in watcher


def test_a_hub_model_id_and_an_existing_model_folder_pass(preflight_script, launcher_overrides, tmp_path, capsys):
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("{}")
    for model in ("Qwen/Qwen2.5-0.5B-Instruct", str(tmp_path / "model")):
        assert preflight_script.main(["--", *launcher_overrides, f"actor_rollout_ref.model.path={model}"]) == 0
        assert "actor_rollout_ref.model.path" not in capsys.readouterr().err


def test_the_plan_says_when_nothing_is_checkpointed():
    from recipes.launch.plan import plan_lines
    from recipes.preflight.compose import compose_config

    schedule = next(line for line in plan_lines(compose_config(["profile=1gpu_smoke"])) if "schedule" in line)
    assert schedule.split(None, 2)[2] == "2 steps; validation every 2 steps, no checkpoints (trainer.save_freq=-1)"


def test_hydras_run_folder_goes_under_the_outputs_not_the_repo(default_dry_run, multinode_dry_run):
    """main_ppo's hydra writes its log and composed config to hydra.run.dir, by default ./outputs/<date>/<time>/
    in the repo root (the launcher's cwd), whatever OUTPUT_DIR says; tests/test_e2e_cpu.py sees where it lands."""
    for proc, output_dir in ((default_dry_run, f"{REPO_ROOT}/outputs/gsm8k_calculator_8xh100"),
                             (multinode_dry_run, "/shared/runs/x")):
        run_dir = override_dict(printed_overrides(proc.stdout))["hydra.run.dir"]
        assert run_dir == output_dir + "/hydra/${now:%Y-%m-%d_%H-%M-%S}"
