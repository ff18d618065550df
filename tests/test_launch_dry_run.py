"""The launcher's decisions, through its Python entry point (recipes/launch: knobs -> overrides, the preflight, the
plan) for every profile and every way a launch must refuse; and the shell front (scripts/run_gsm8k_grpo.sh,
submit_multinode.sh) end to end in a subprocess, a few times.

A launch-mode call here must always fail its preflight (nothing may start): each sets up one problem."""

import json
import os
import re
import subprocess
import sys

import pytest
from omegaconf import OmegaConf

from recipes.constants import PROFILE_DIR, REPO_ROOT
from recipes.launch import ray_job
from recipes.launch.__main__ import main as launcher_main
from recipes.launch.decision import MAIN_PPO, SUBMIT, TRAIN, dry_run_lines, plan_launch
from recipes.launch.knobs import KnobError, Knobs
from testkit.launcher import STAND_IN_WANDB_KEY, clean_environ, override_dict, plan, run_script

pytestmark = pytest.mark.integration

PROFILES = sorted(p.stem for p in PROFILE_DIR.glob("*.yaml"))
DEFAULT_PROFILE = "8xh100"  # scripts/run_gsm8k_grpo.sh's PROFILE default: the conftest's default_dry_run
DEFAULT_EXPERIMENT = "gsm8k_calculator_Qwen2.5-3B-Instruct_8xh100"  # gsm8k_<tool set>_<model>_<profile>


SUBMITTER_KNOBS = {"OUTPUT_DIR": "/shared/runs/x", "DRY_RUN": "1", "PUBLISH_EVALS": "1", "EXPERIMENT_NAME": "exp1"}


@pytest.fixture(scope="module")
def submitted(prepared_data_dir):
    """A DRY_RUN of scripts/submit_multinode.sh (SUBMIT=ray, PROFILE=multinode) with some launcher knobs set."""
    planned = plan(prepared_data_dir, "trainer.total_epochs=1", SUBMIT="ray", PROFILE="multinode",
                   RAY_ADDRESS="http://127.0.0.1:1", **SUBMITTER_KNOBS)
    assert planned.preflight.ok, planned.err
    return planned


@pytest.fixture(scope="module")
def multinode_dry_run(prepared_data_dir):
    """The same knobs and arguments, launched on this node with PROFILE=multinode."""
    planned = plan(prepared_data_dir, "trainer.total_epochs=1", PROFILE="multinode", **SUBMITTER_KNOBS)
    assert planned.preflight.ok, planned.err
    return planned


def test_profiles_cover_what_users_need():
    assert {"8xh100", "4gpu", "1gpu_smoke", "lora", "multinode"} <= set(PROFILES)


@pytest.mark.parametrize("profile", PROFILES)
def test_every_profile_dry_runs(prepared_data_dir, default_dry_run, request, tmp_path, profile):
    if profile == DEFAULT_PROFILE:
        planned = default_dry_run
    elif profile == "multinode":  # several nodes need shared outputs: that launch sets OUTPUT_DIR
        planned = request.getfixturevalue("multinode_dry_run")
    elif profile == "gpu_learn":  # scripts/learn_gpu.sh gives it the learning check's small model
        (tmp_path / "small").mkdir()
        (tmp_path / "small" / "config.json").write_text("{}")
        planned = plan(prepared_data_dir, PROFILE=profile, DRY_RUN="1", MODEL_PATH=str(tmp_path / "small"))
    elif profile.startswith("cpu_"):  # their scripts run them on verl's CPU platform (scripts/cpu_env.sh)
        planned = plan(prepared_data_dir, PROFILE=profile, DRY_RUN="1", VERL_PLATFORM="cpu")
    else:
        planned = plan(prepared_data_dir, PROFILE=profile, DRY_RUN="1")
    assert planned.preflight.ok, planned.err
    assert "[preflight] ok" in planned.err
    command = planned.launch.main_ppo_command()
    assert command[1:3] == ["-m", "recipes.trainer.main_ppo"]
    assert "--config-name=gsm8k_multiturn_grpo" in command and f"profile={profile}" in command
    # every override names a key of verl 0.9.1's schema: none needs hydra's `+` to be accepted
    assert not [arg for arg in command if arg.startswith("+")]
    assert OmegaConf.select(planned.launch.config, "algorithm.adv_estimator") == "grpo"


def test_the_shell_launcher_is_a_thin_front_over_the_declared_knobs(tmp_path):
    """scripts/run_gsm8k_grpo.sh declares no knob: it picks the Python and hands the environment on as it is, so
    the entry point reads every knob, defaults included, from their one declaration (recipes/launch/knobs.py); a
    PYTHON that records its environment stands in for the interpreter, so nothing runs."""
    recorder = tmp_path / "python"
    got_file = tmp_path / "got"
    recorder.write_text(f"#!{sys.executable}\nimport json, os, sys\n"
                        "json.dump({'argv': sys.argv[1:], 'env': dict(os.environ)}, "
                        f"open({str(got_file)!r}, 'w'))\n")
    recorder.chmod(0o755)
    env = clean_environ(PYTHON=str(recorder), HOME=str(tmp_path), PROFILE="4gpu")
    proc = subprocess.run(["bash", str(REPO_ROOT / "scripts" / "run_gsm8k_grpo.sh"), "trainer.total_epochs=1"],
                          env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    got = json.loads((tmp_path / "got").read_text())
    assert got["argv"] == ["-m", "recipes.launch", "trainer.total_epochs=1"]
    assert {name for name in Knobs.names() if name in got["env"]} == {"PYTHON", "PROFILE"}
    assert Knobs.from_environ(got["env"]) == Knobs(python=str(recorder), profile="4gpu")
    script = (REPO_ROOT / "scripts" / "run_gsm8k_grpo.sh").read_text()
    assert not re.findall(r"^[A-Z][A-Z0-9_]*=\$\{", script, re.M), "a knob declared in the script"


def test_the_shell_launcher_dry_runs_end_to_end(prepared_data_dir, tmp_path):
    """The shell front in a subprocess: the plan, the composed config in the file DRY_RUN_CONFIG names, the main_ppo
    command last, and the one line that says where the traces go."""
    config = tmp_path / "dry" / "config.yaml"
    proc = run_script("run_gsm8k_grpo.sh", prepared_data_dir, "trainer.total_epochs=1", DRY_RUN="1",
                      DRY_RUN_CONFIG=str(config))
    assert proc.returncode == 0, proc.stderr
    assert "adv_estimator: grpo" in config.read_text() and "adv_estimator" not in proc.stdout
    assert len(proc.stdout.splitlines()) <= 17, proc.stdout
    last = proc.stdout.splitlines()[-1]
    assert " -m recipes.trainer.main_ppo " in last and last.endswith("trainer.total_epochs=1")
    assert sum(line.startswith("[traces] Weave traces: ") for line in proc.stderr.splitlines()) == 1, proc.stderr


def test_default_launch_is_the_recipe(default_dry_run):
    overrides = default_dry_run.overrides
    assert overrides["actor_rollout_ref.rollout.multi_turn.tool_config_path"] == \
        f"{REPO_ROOT}/config/tool_config/calculator.yaml"
    assert overrides["reward.custom_reward_function.path"] == f"{REPO_ROOT}/recipes/gsm8k/reward.py"
    assert overrides["trainer.default_local_dir"] == f"{REPO_ROOT}/outputs/{DEFAULT_EXPERIMENT}/checkpoints"
    # the recipe's values come from its YAML, not from the launcher
    assert "actor_rollout_ref.rollout.n" not in overrides and "data.train_batch_size" not in overrides
    config = default_dry_run.launch.config
    for key, value in (("actor_rollout_ref.rollout.n", 16), ("data.train_batch_size", 256),
                       ("actor_rollout_ref.rollout.tensor_model_parallel_size", 1),
                       ("actor_rollout_ref.rollout.max_num_seqs", 512), ("trainer.max_actor_ckpt_to_keep", 2),
                       ("actor_rollout_ref.rollout.trace.max_samples_per_step_per_worker", 1),
                       ("actor_rollout_ref.rollout.agent.num_workers", 16),
                       ("actor_rollout_ref.rollout.trace.token2text", True)):
        assert OmegaConf.select(config, key) == value, key


def test_the_dry_run_plan_says_what_the_launch_would_do(default_dry_run, prepared_data_dir):
    planned = default_dry_run
    assert "(profile 8xh100)" in dry_run_lines(planned.launch)[0]
    assert planned.row("model") == "Qwen/Qwen2.5-3B-Instruct"
    assert planned.row("data") == \
        f"train {prepared_data_dir}/train.parquet, validation {prepared_data_dir}/test.parquet"
    tool_file = f"{REPO_ROOT}/config/tool_config/calculator.yaml"
    assert planned.row("tools") == f"calculator ({tool_file}), at most 5 assistant turns"
    assert planned.row("hardware").startswith("1 node(s) x 8 GPU(s); rollout sglang, TP 1: 8 engine(s)")
    assert planned.row("batch").startswith("256 prompts x 16 samples = 4096 trajectories per step")
    assert planned.row("tracing").startswith(  # its volume: tests/test_trace_volume.py
        "weave, 16 GRPO group(s) a step (1 prompt(s) on each of the 16 agent-loop workers, all 16 rollouts")
    assert planned.row("outputs").startswith(f"{REPO_ROOT}/outputs/{DEFAULT_EXPERIMENT} (checkpoints/")
    # why verl's deprecated trainer: said once, where verl's own warning would otherwise puzzle
    assert planned.row("trainer").startswith("legacy (trainer.use_v1=false), on purpose: verl 0.9.1's V1 trainer")


def test_a_launch_says_why_it_uses_the_legacy_trainer(preflight_script, launcher_overrides, capsys):
    assert preflight_script.main(["--", *launcher_overrides]) == 0
    err = capsys.readouterr().err
    assert "[launch] trainer: legacy (trainer.use_v1=false), on purpose" in err
    assert "Disabled critic" not in err  # GRPO's critic is off in the config, not inferred with a warning


def test_user_overrides_pass_through_and_stale_keys_warn(prepared_data_dir):
    planned = plan(prepared_data_dir, "+trainer.rollout_trace.backend=weave", "trainer.total_epochs=1", DRY_RUN="1")
    assert planned.preflight.ok, planned.err
    assert "WARNING: '+trainer.rollout_trace.backend=weave'" in planned.err
    assert "use actor_rollout_ref.rollout.trace.*" in planned.err
    assert planned.launch.main_ppo_command()[-2:] == ["+trainer.rollout_trace.backend=weave", "trainer.total_epochs=1"]


def test_publishing_evaluations_while_training_runs_a_watcher_beside_main_ppo(prepared_data_dir, default_dry_run,
                                                                             tmp_path, monkeypatch, capsys):
    config = tmp_path / "dry" / "config.yaml"  # DRY_RUN_CONFIG: where the user wants the composed config
    # TP: a knob of a launcher before the first release; a shell that still sets it changes nothing
    env = clean_environ(PYTHON=sys.executable, DATA_DIR=str(prepared_data_dir), DRY_RUN="1", PUBLISH_EVALS="1",
                        OUTPUT_DIR="/runs/a", DRY_RUN_CONFIG=str(config), TP="2", WANDB_API_KEY=STAND_IN_WANDB_KEY)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert launcher_main([], env) == 0  # the entry point's DRY_RUN: writes the composed config where asked
    assert "default_local_dir: /runs/a/checkpoints" in config.read_text()
    capsys.readouterr()
    planned = plan(prepared_data_dir, DRY_RUN="1", PUBLISH_EVALS="1", OUTPUT_DIR="/runs/a", TP="2")
    assert "tensor_model_parallel_size" not in " ".join(planned.launch.overrides)
    watcher = planned.launch.watcher_command(launcher_pid=4242)
    assert watcher[1:5] == ["-m", "recipes.results.publish", "--validation_dir", "/runs/a/validation"]
    assert watcher[-3:] == ["--watch", "--stop_when_pid_exits", "4242"]
    assert default_dry_run.launch.watcher_command() is None  # off by default


def test_rollout_concurrency_below_a_step_is_warned(preflight_script, launcher_overrides, capsys):
    """TP=2 halves the engines: half the trajectories of a step wait (the arithmetic is the preflight's)."""
    tp2 = "actor_rollout_ref.rollout.tensor_model_parallel_size=2"
    assert preflight_script.main(["--", *launcher_overrides, tp2]) == 0
    assert "only 2048 of the 4096 trajectories of a step can run at once" in capsys.readouterr().err


@pytest.mark.parametrize(
    "env, message",
    [
        ({"PROFILE": "16xh100"}, re.escape("unknown PROFILE=16xh100; choose one of: 1gpu_smoke 1x24gb 1x24gb_lora "
                                           "1x80gb 4gpu 4x40gb 8xh100 lora multinode (and cpu_learn for scripts/"
                                           "learn_cpu.sh, cpu_smoke for scripts/smoke_cpu.sh, gpu_learn for scripts/"
                                           "learn_gpu.sh)")),
        ({"PROFILE": "gpu_learn"}, re.escape("PROFILE=gpu_learn is scripts/learn_gpu.sh's (it gives the profile its "
                                             "small model (MODEL_PATH)), not a launch profile: run bash "
                                             "scripts/learn_gpu.sh")),
        ({"PROFILE": "cpu_smoke"}, "PROFILE=cpu_smoke is scripts/smoke_cpu.sh's .* not a launch profile"),
        ({"TRACE": "maybe"}, "TRACE must be on or off"),
        ({"TOOL_SET": "calculater"},
         "unknown TOOL_SET=calculater; choose one of: both calc_gsm8k_reward calculator none"),
        ({"TRACE_RELAY": "maybe"}, "TRACE_RELAY must be auto, off or offline"),
        ({"TRACE_RELAY": "offline"}, "TRACE_RELAY=offline needs WANDB_ENTITY"),
        ({"SUBMIT": "slurm"}, "SUBMIT must be ray or empty"),
    ],
)
def test_a_knob_the_launch_cannot_use_is_refused_in_one_line(prepared_data_dir, env, message):
    with pytest.raises(KnobError, match=message):
        plan(prepared_data_dir, DRY_RUN="1", **env)


# ---- what a newcomer meets: the time a run takes, the dry run as strict as the launch, a laptop offline ----------

def test_the_plan_says_what_the_run_takes_and_where_the_step_time_comes_from(gsm8k_sized):
    assert profile_plan(gsm8k_sized, "8xh100")["time"] == (
        "~7.2-11 h: 435 steps x 60-90 s a step (the 8xH100 estimate from the work a step does, "
        "docs/configuration.md#step-time-on-8xh100-estimate); validations and checkpoints not counted")
    assert profile_plan(gsm8k_sized, "1x24gb")["time"].startswith(
        "~4.9-9.7 days: 3495 steps x 2-4 min a step (projected")
    # another model: the profile's step time, scaled by its parameters, and said so
    bigger = profile_plan(gsm8k_sized, "1x24gb", "actor_rollout_ref.model.path=Qwen/Qwen2.5-1.5B-Instruct")["time"]
    assert "3495 steps x 6.2-12 min a step" in bigger and "made for Qwen2.5-0.5B, x3.1 for this model's 1.5B" in bigger
    assert profile_plan(gsm8k_sized, "1x24gb", "trainer.total_training_steps=10")["time"].startswith("~20-40 min: 10")


def dry_run_in_process(monkeypatch, tmp_path, data_dir, **env) -> tuple[int, str, str]:
    """The entry point's DRY_RUN as the shell front runs it, in this process: (exit status, stdout, stderr)."""
    import contextlib
    import io

    environ = clean_environ(PYTHON=sys.executable, DATA_DIR=str(data_dir), DRY_RUN="1", HOME=str(tmp_path),
                            DRY_RUN_CONFIG=str(tmp_path / "config.yaml"), **env)
    for name in [k for k in list(os.environ) if k not in environ]:
        monkeypatch.delenv(name)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = launcher_main([], environ)
    return status, out.getvalue(), err.getvalue()


def test_a_dry_run_without_a_wandb_key_prints_its_plan_and_fails_as_the_launch_would(prepared_data_dir,
                                                                                     monkeypatch, tmp_path):
    status, out, err = dry_run_in_process(monkeypatch, tmp_path, prepared_data_dir)
    assert status == 1, err
    assert ("[preflight] ERROR: wandb logger and weave trace need W&B credentials: export WANDB_API_KEY=... (or "
            "`wandb login` for api.wandb.ai), or turn them off with LOGGER=console TRACE=off") in err
    assert "[preflight] not checked by a dry run (they need the GPU node): its GPU count" in err  # said, not skipped
    assert out.startswith("# DRY_RUN=1: the preflight found 1 problem(s) (above) that stop a launch, nothing "
                          "started; fixed, the launch would run (profile 8xh100):\n#   model     "), out
    assert "#   time      ~30-45 min: 30 steps x 60-90 s a step" in out  # 15 epochs of 520 rows // 256
    assert out.splitlines()[-1].split()[1:3] == ["-m", MAIN_PPO]


def test_a_laptop_plans_a_model_it_has_not_downloaded_and_still_catches_a_typo(prepared_data_dir, tmp_path):
    offline = {"HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(tmp_path / "empty"), "PATH": "/usr/bin:/bin"}
    planned = plan(prepared_data_dir, DRY_RUN="1", PROFILE="1x24gb", **offline)
    assert planned.preflight.ok, planned.err
    (line,) = [x for x in planned.err.splitlines() if "Qwen/Qwen2.5-0.5B-Instruct is not in" in x]
    assert line == (f"[preflight] WARNING: model: Qwen/Qwen2.5-0.5B-Instruct is not in the local Hugging Face cache "
                    f"{tmp_path / 'empty'} (HF_HUB_OFFLINE=1: the cache was asked, not the hub): planned from the "
                    "recipe's table of its size; download it before the launch, where the hub can be reached: hf "
                    f"download Qwen/Qwen2.5-0.5B-Instruct (into {tmp_path / 'empty'}, or set MODEL_PATH to a folder "
                    "holding it)")
    assert planned.row("memory").endswith("0.49B parameters from the recipe's Qwen2.5-0.5B table (nothing of it here)")
    # the card the profile is named for, with no GPU to ask
    assert planned.row("memory").startswith("~18 of 24 GB a GPU at its peak")
    assert "24 GB: the card the profile is for (recipe.gpu_memory_gb), no nvidia-smi here" in planned.row("memory")
    assert plan(prepared_data_dir, DRY_RUN="1", PROFILE="4x40gb", **offline).row("memory").startswith("~30 of 40 GB")
    typo = plan(prepared_data_dir, DRY_RUN="1", PROFILE="1x24gb", MODEL_PATH="Qwen/Qwen2.5-0.5b-instruct", **offline)
    assert not typo.preflight.ok and "did you mean Qwen/Qwen2.5-0.5B-Instruct?" in typo.err


@pytest.mark.parametrize(
    "args, env, message",
    [
        ((), {"DATA_DIR": "/nonexistent/gsm8k"}, "data.train_files: /nonexistent/gsm8k/train.parquet not found"),
        ((), {"TOOL_SET": "calc_gsm8k_reward"}, "rows were prepared for tool set 'calculator'"),
        ((), {"PROFILE": "multinode"}, "is inside the repo or Ray's temp dir"),
        (("trainer.use_v1=True",), {}, "V1 trainer never traces agent loops"),
        ((), {"MODEL_PATH": "/nonexistent/models/Qwen2.5-3B-Instruct"},
         "actor_rollout_ref.model.path: /nonexistent/models/Qwen2.5-3B-Instruct does not exist; set MODEL_PATH"),
    ],
)
def test_dry_run_refuses_what_would_fail(prepared_data_dir, args, env, message):
    env = {"DATA_DIR": str(prepared_data_dir), **env}
    planned = plan(env.pop("DATA_DIR"), *args, DRY_RUN="1", **env)
    assert not planned.preflight.ok
    assert message in planned.err, planned.err


@pytest.fixture(scope="module")
def preflight_script():
    from recipes.launch import preflight_command

    return preflight_command


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
    """The launcher's preflight checks, through gsm8k-preflight: a default launch's overrides with a user's
    override after them, as the launcher passes them."""
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
def test_a_real_launch_stops_before_any_gpu_work(prepared_data_dir, monkeypatch, capsys, env, message):
    """The entry point in training mode: its preflight refuses, and nothing is started (no relay, no main_ppo)."""
    from recipes.launch import training

    monkeypatch.setattr(training, "run_training", lambda launch: pytest.fail("the launch went on to train"))
    environ = clean_environ(PYTHON=sys.executable, DATA_DIR=str(prepared_data_dir), **env)
    for name in [k for k in list(os.environ) if k not in environ]:
        monkeypatch.delenv(name)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    assert plan_launch(Knobs.from_environ(environ), [], environ).mode == TRAIN
    assert launcher_main([], environ) == 1
    err = capsys.readouterr().err
    assert message in err and "nothing was started" in err


def test_multinode_submission_needs_a_cluster_address(prepared_data_dir):
    proc = run_script("submit_multinode.sh", prepared_data_dir, timeout=60)
    assert proc.returncode != 0 and "set RAY_ADDRESS to the Ray dashboard address" in proc.stderr


def test_multinode_submission_dry_runs_end_to_end(prepared_data_dir):
    proc = run_script("submit_multinode.sh", prepared_data_dir, "trainer.total_epochs=1",
                      RAY_ADDRESS="http://127.0.0.1:1", **SUBMITTER_KNOBS)
    assert proc.returncode == 0, proc.stderr
    assert "submitted as a Ray job" in proc.stdout and f"`{ray_job.ENTRYPOINT}`" in proc.stdout


def test_multinode_submission_resolves_the_same_knobs_with_repo_relative_paths(submitted, multinode_dry_run):
    assert submitted.launch.mode == "dry_run" and submitted.launch.cluster
    relative = [o.replace(f"={REPO_ROOT}/", "=./") for o in multinode_dry_run.launch.overrides]
    assert submitted.launch.overrides == relative
    # every node of the cluster gets a relay, each spooling to its own disk
    relay = submitted.launch.relay
    assert relay.cluster and relay.spool == f"/var/tmp/gsm8k_recipe_traces-{os.geteuid()}/exp1" and relay.run


def test_the_ray_job_runs_the_launcher_with_what_the_submitter_resolved(submitted):
    """The job's entrypoint is the launcher's entry point on the cluster, in an environment without the submitting
    shell's knobs: what the submitter chose (watcher on, experiment, output dir, main_ppo's overrides) holds."""
    launch = submitted.launch
    knobs = {k: v for k, v in launch.knobs.as_environ().items() if k not in ("SUBMIT", "DRY_RUN", "DRY_RUN_CONFIG")}
    payload = ray_job.job_payload(knobs, launch.overrides)
    cluster_env = {"RAY_ADDRESS": "10.0.0.1:6379", ray_job.LAUNCH_ENV: payload}  # what the job's process gets
    job = ray_job.read_job_payload(cluster_env)
    on_cluster = plan_launch(Knobs(**{k.lower(): v for k, v in job["knobs"].items()}), [], cluster_env, job=job)
    assert (on_cluster.mode, on_cluster.job, on_cluster.cluster) == (TRAIN, True, True)
    assert on_cluster.overrides == launch.overrides
    watcher = on_cluster.watcher_command()
    assert watcher[watcher.index("--experiment") + 1] == "exp1"
    assert watcher[watcher.index("--validation_dir") + 1] == "/shared/runs/x/validation"
    assert watcher[watcher.index("--tool_set") + 1] == "calculator"
    with pytest.raises(ValueError, match="secrets never"):
        ray_job.job_payload({"WANDB_API_KEY": "k"}, [])


def test_a_job_without_what_the_submitter_resolved_says_so(capsys):
    assert launcher_main(["--job"], {"RAY_ADDRESS": "10.0.0.1:6379"}) == 1
    assert f"with {ray_job.LAUNCH_ENV} from the submitting launcher" in capsys.readouterr().err


def test_a_launch_that_joins_a_running_cluster_drops_rays_sizes(prepared_data_dir):
    """PROFILE=cpu_smoke sizes the Ray main_ppo starts itself (num_cpus, num_gpus); Ray refuses those settings from
    a driver that joins a cluster, so on one they are dropped, and every node gets a relay."""
    planned = plan(prepared_data_dir, PROFILE="cpu_smoke", VERL_PLATFORM="cpu", SUBMIT="ray", DRY_RUN="1",
                   RAY_ADDRESS="http://127.0.0.1:1", OUTPUT_DIR="/shared/runs/cpu", TRACE="on")
    assert planned.preflight.ok, planned.err
    assert planned.launch.overrides[-2:] == ["ray_kwargs.ray_init.num_cpus=null", "ray_kwargs.ray_init.num_gpus=null"]
    alone = plan(prepared_data_dir, PROFILE="cpu_smoke", VERL_PLATFORM="cpu", DRY_RUN="1", RAY_ADDRESS="local")
    assert not alone.launch.cluster and not any("ray_init" in o for o in alone.launch.overrides)


def test_submitting_needs_an_address(prepared_data_dir, capsys):
    environ = clean_environ(PYTHON=sys.executable, DATA_DIR=str(prepared_data_dir), SUBMIT="ray")
    assert plan_launch(Knobs.from_environ(environ), [], environ).mode == SUBMIT
    assert launcher_main([], environ) == 1
    assert "set RAY_ADDRESS" in capsys.readouterr().err


def test_a_hub_model_id_and_an_existing_model_folder_pass(preflight_script, launcher_overrides, tmp_path, capsys):
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("{}")
    for model in ("Qwen/Qwen2.5-0.5B-Instruct", str(tmp_path / "model")):
        assert preflight_script.main(["--", *launcher_overrides, f"actor_rollout_ref.model.path={model}"]) == 0
        assert "actor_rollout_ref.model.path" not in capsys.readouterr().err


def test_the_plan_says_when_nothing_is_checkpointed():
    from recipes.launch.plan import plan_rows
    from recipes.preflight.compose import compose_config
    from recipes.preflight.facts import facts_of

    schedule = dict(plan_rows(facts_of(compose_config(["profile=1gpu_smoke"]))))["schedule"]
    assert schedule == "2 steps (trainer.total_training_steps); validation every 2 steps, no checkpoints " \
                       "(trainer.save_freq=-1)"


def test_hydras_run_folder_goes_under_the_outputs_not_the_repo(default_dry_run, multinode_dry_run):
    """main_ppo's hydra writes its log and composed config to hydra.run.dir, by default ./outputs/<date>/<time>/
    in the repo root (the launcher's cwd), whatever OUTPUT_DIR says; tests/test_e2e_cpu.py sees where it lands."""
    for planned, output_dir in ((default_dry_run, f"{REPO_ROOT}/outputs/{DEFAULT_EXPERIMENT}"),
                                (multinode_dry_run, "/shared/runs/x")):
        run_dir = override_dict(planned.launch.overrides)["hydra.run.dir"]
        assert run_dir == output_dir + "/hydra/${now:%Y-%m-%d_%H-%M-%S}"


def test_print_output_dir_answers_without_a_preflight(capsys):
    """scripts/eval_gsm8k.sh asks the launcher where a run's outputs go (PRINT_OUTPUT_DIR=1)."""
    assert launcher_main([], {"PRINT_OUTPUT_DIR": "1", "EXPERIMENT_NAME": "e", "PROFILE": "no_such_profile"}) == 0
    assert capsys.readouterr().out == f"{REPO_ROOT}/outputs/e\n"  # no preflight: the profile is not looked at


@pytest.fixture(scope="module")
def gsm8k_sized(tmp_path_factory):
    """Parquet files of GSM8K's sizes (7473 / 1319 rows): the plan reads only their row counts."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder = tmp_path_factory.mktemp("gsm8k_sized")
    for split, rows in (("train", 7473), ("test", 1319)):
        pq.write_table(pa.table({"row": list(range(rows))}), folder / f"{split}.parquet")
    return folder


def profile_plan(folder, profile: str, *extra: str) -> dict[str, str]:
    from recipes.launch.plan import plan_rows
    from recipes.preflight.compose import compose_config
    from recipes.preflight.facts import facts_of

    overrides = [f"profile={profile}", f"data.train_files={folder}/train.parquet",
                 f"data.val_files={folder}/test.parquet", *extra]
    return dict(plan_rows(facts_of(compose_config(overrides)), None, overrides))


def test_the_plan_says_updates_steps_and_what_validation_scores(gsm8k_sized):
    rows = profile_plan(gsm8k_sized, "8xh100")
    assert rows["algorithm"] == ("GRPO, lr 1e-06 (constant), KL loss 0.001; 1 actor update per step (mini-batch = "
                                 "the step's 256 prompts, 4096 trajectories each)")
    assert rows["schedule"].startswith("435 steps = 15 epochs x 29 (7473 rows // 256);")
    assert rows["validate"].startswith("all 1319 questions x 1 sample(s) at temperature 0, up to 1024 response tokens")
    assert "differs" not in rows  # the recipe's own profile
    # the traces of the whole run: a step's times the steps the schedule counts
    volume = r"~([\d.]+) MB a step, .*~([\d.]+) GB per run \(435 steps\)"
    per_step, per_run = re.search(volume, rows["tracing"]).groups()
    assert float(per_run) == pytest.approx(float(per_step) * 435 / 1e3, abs=0.01)
    smoke = profile_plan(gsm8k_sized, "1gpu_smoke", "trainer.val_only=True")
    assert smoke["validate"].startswith("64 of 1319 questions, drawn at random each run (data.val_max_samples=64)")
    assert "up to 512 response tokens" in smoke["validate"] and "algorithm" not in smoke


def test_profiles_that_change_the_algorithm_say_so_and_multinode_keeps_one_update_a_step(gsm8k_sized):
    multinode = profile_plan(gsm8k_sized, "multinode")
    assert "1 actor update per step (mini-batch = the step's 512 prompts" in multinode["algorithm"]
    assert "210 updates of 8192 trajectories (8xh100: 435 of 4096), at the same lr 1e-06" in multinode["differs"]
    four = profile_plan(gsm8k_sized, "4gpu")
    assert four["schedule"].startswith("870 steps = 15 epochs x 58 (7473 rows // 128)")
    assert four["differs"] == ("the algorithm, against 8xh100: prompts per step 128 (8xh100: 256); mini-batch 128 "
                               "(8xh100: 256); 870 updates of 2048 trajectories (8xh100: 435 of 4096), at the same "
                               "lr 1e-06 (why: config/profile/4gpu.yaml)")
    assert "870" in (REPO_ROOT / "config" / "profile" / "4gpu.yaml").read_text()  # the why is written there
    assert profile_plan(gsm8k_sized, "lora")["differs"].startswith("the algorithm, against 8xh100: lr 3e-05")
    # two updates a step, as multinode had: said, with the off-policy cost
    two = profile_plan(gsm8k_sized, "multinode", "actor_rollout_ref.actor.ppo_mini_batch_size=256")
    assert "2 actor updates per step (mini-batches of 256 of the step's 512 prompts: all but the first off-policy" \
        in two["algorithm"]
