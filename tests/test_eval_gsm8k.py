"""scripts/eval_gsm8k.sh (dry run through the launcher's preflight) and gsm8k-eval-summary's numbers."""

import json
import os
import shlex
import subprocess
import sys
from itertools import combinations
from pathlib import Path

import pytest

from data_prep import gsm8k
from recipes import folder_guard
from recipes.results.scoring import pass_at_k
from testkit.commands import command
from testkit.hf_cache import write_cached_model

pytestmark = pytest.mark.integration

REPO_ROOT = Path(__file__).resolve().parents[1]


def eval_dry_run(data_dir, **env):
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_API_KEY")}
    full_env.update({"PYTHON": sys.executable, "DATA_DIR": str(data_dir), "DRY_RUN": "1", **env})
    return subprocess.run(["bash", str(REPO_ROOT / "scripts" / "eval_gsm8k.sh")], env=full_env,
                          capture_output=True, text=True, timeout=180)


EARLIER = '{"input": "Q", "output": "#### 1"}\n'  # an earlier evaluation's dump line


@pytest.fixture(scope="module")
def pass_at_4_dry_run(prepared_data_dir, tmp_path_factory):
    """One dry run several tests read (each costs the preflight's seconds): tools on (the calculator), 4 samples at
    temperature 1.0, a hub model id, the outputs in a given folder that holds an earlier evaluation (OVERWRITE=1)."""
    out = tmp_path_factory.mktemp("eval") / "ev"
    folder_guard.claim(out / "validation", "eval_gsm8k")  # as an earlier evaluation left it: marked as its own
    (out / "validation" / "0.jsonl").write_text(EARLIER)
    hub_cache = tmp_path_factory.mktemp("hub")
    write_cached_model(hub_cache, "org/My-Model", {})  # downloaded: the preflight finds it (HF_HUB_OFFLINE=1)
    proc = eval_dry_run(prepared_data_dir, OUTPUT_DIR=str(out), VAL_N="4", VAL_TEMPERATURE="1.0",
                        MODEL_PATH="org/My-Model", OVERWRITE="1", HF_HUB_CACHE=str(hub_cache))
    assert proc.returncode == 0, proc.stderr
    return proc, out


def main_ppo_command(proc) -> list[str]:
    return shlex.split([line for line in proc.stdout.splitlines() if "recipes.trainer.main_ppo" in line][-1])


def check_eval_command(proc, tool_set: str) -> None:
    assert "[preflight] ok" in proc.stderr
    command = main_ppo_command(proc)
    for override in ("trainer.val_only=True", "trainer.val_before_train=True",
                     "actor_rollout_ref.actor.use_kl_loss=False",  # no reference model: nothing is trained
                     "actor_rollout_ref.rollout.val_kwargs.n=4",
                     "actor_rollout_ref.rollout.val_kwargs.temperature=1.0",
                     "actor_rollout_ref.rollout.trace.backend=null", "trainer.logger=[console]"):
        assert override in command
    tool_config = next(c for c in command if c.startswith("actor_rollout_ref.rollout.multi_turn.tool_config_path="))
    assert tool_config.endswith("calculator.yaml" if tool_set == "calculator" else "=null")
    assert "recipes.results.summary --validation_dir" in proc.stdout and "--k 4" in proc.stdout


def test_eval_dry_run_composes_and_validates_with_tools(pass_at_4_dry_run):
    proc, _ = pass_at_4_dry_run
    check_eval_command(proc, "calculator")
    assert "# not publishing to Weave (LOGGER=console has no wandb; PUBLISH=1 to publish)" in proc.stdout


def test_eval_dry_run_composes_and_validates_without_tools_and_publishes(mini_gsm8k_dir, tmp_path):
    assert gsm8k.main(["--input_dir", str(mini_gsm8k_dir), "--local_save_dir", str(tmp_path),
                       "--tool_set", "none"]) == 0
    proc = eval_dry_run(tmp_path, TOOL_SET="none", VAL_N="4", VAL_TEMPERATURE="1.0", PUBLISH="1")
    assert proc.returncode == 0, proc.stderr
    check_eval_command(proc, "none")
    publish_line = shlex.split([line for line in proc.stdout.splitlines() if "recipes.results.publish" in line][-1])
    assert publish_line[publish_line.index("--tool_set") + 1] == "none" and "--k 1 --k 4" in " ".join(publish_line)


def test_several_greedy_samples_are_refused(prepared_data_dir):
    """verl's agent loop samples at val_kwargs.temperature whatever do_sample says: n greedy samples are n copies."""
    proc = eval_dry_run(prepared_data_dir, VAL_N="8")
    assert proc.returncode == 1 and "would all be identical (greedy); set VAL_TEMPERATURE=1.0" in proc.stderr
    assert "main_ppo" not in proc.stdout


def test_eval_outputs_go_where_the_launcher_puts_them(pass_at_4_dry_run):
    proc, out = pass_at_4_dry_run
    assert f"trainer.validation_data_dir={out}/validation" in proc.stdout
    assert f"recipes.results.summary --validation_dir {out}/validation" in proc.stdout
    assert "trainer.experiment_name=eval_My-Model_default_tools_n4_t1.0" in proc.stdout


def test_tools_off_eval_refuses_tool_data(mini_gsm8k_dir, tmp_path):
    assert gsm8k.main(["--input_dir", str(mini_gsm8k_dir), "--local_save_dir", str(tmp_path)]) == 0
    proc = eval_dry_run(tmp_path, TOOL_SET="none")
    assert proc.returncode != 0 and "rows were prepared for tool set 'calculator'" in proc.stderr


def brute_force_pass_at_k(outcomes, k):
    """Share of k-subsets of the samples that contain a correct one: the definition, counted."""
    subsets = list(combinations(outcomes, k))
    return sum(any(s) for s in subsets) / len(subsets)


@pytest.mark.parametrize("outcomes", [(1, 0, 0, 0), (0, 0, 0, 0), (1, 1, 0, 1), (0, 1, 0, 0, 1, 0)])
def test_pass_at_k_is_the_unbiased_estimator(outcomes):
    for k in range(1, len(outcomes) + 1):
        assert pass_at_k(len(outcomes), sum(outcomes), k) == pytest.approx(brute_force_pass_at_k(outcomes, k))


def scored(acc_strict, acc_flexible, calls, pred):
    """A dump line's reward keys, as the run's agent loop scored the trajectory (recipes/gsm8k/reward.py's)."""
    return {"acc_strict": acc_strict, "acc_flexible": acc_flexible, "format_ok": float(pred != ""),
            "num_tool_calls": calls, "num_bad_tool_calls": 0, "pred": pred}


def test_summary_of_a_handmade_dump(tmp_path):
    call = '<tool_call>\n{"name": "calculator", "arguments": {"expression": "6*7"}}\n</tool_call>'
    lines = [  # two questions x 2 samples, with the scores the run gave them (nothing is re-scored)
        {"input": "Q1", "gts": "42", **scored(1.0, 1.0, 1, "42"),
         "output": f"{call}\nuser\n<tool_response>\n42\n</tool_response>\nassistant\n#### 42"},
        {"input": "Q1", "output": "It is 41.", "gts": "42", **scored(0.0, 0.0, 0, "")},
        {"input": "Q2", "output": f"{call}\nuser\n<tool_response>\n7\n</tool_response>\nassistant\nso 7", "gts": "7",
         **scored(0.0, 1.0, 1, "")},
        {"input": "Q2", "output": "#### 8", "gts": "7", **scored(0.0, 0.0, 0, "8")},
    ]
    (tmp_path / "0.jsonl").write_text("".join(json.dumps({**line, "score": 0, "step": 0}) + "\n" for line in lines))
    proc = subprocess.run([*command("gsm8k-eval-summary"), "--validation_dir", str(tmp_path), "--k", "1",
                           "--k", "2"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert (summary["prompts"], summary["samples_per_prompt"]) == (2, 2)
    assert summary["strict_acc"] == 0.25 and summary["flexible_acc"] == 0.5
    assert summary["tool_calls_per_answer"] == 0.5 and summary["tool_call_rate"] == 0.5
    assert summary["pass@1_strict"] == 0.25 and summary["pass@2_strict"] == 0.5 and summary["pass@2_flexible"] == 1.0
    assert proc.stdout.strip().splitlines()[-1] == (
        "RESULT strict_acc=0.2500 flexible_acc=0.5000 tool_calls_per_answer=0.5000")


def test_summary_by_operations_needed_and_calls_per_operation(tmp_path):
    """Dumps whose reward gave ref_ops (the reference solution's steps): accuracy and calls by depth, and calls per
    operation over the correct answers needing 2+ operations (at most 1 per answer)."""
    lines = [  # (ops, correct, calls)
        (1, 1.0, 1), (1, 0.0, 0),
        (2, 1.0, 2), (2, 1.0, 1), (2, 0.0, 2),  # the second: right with one step done in its head
        (3, 1.0, 4), (3, 0.0, 1), (3, 0.0, 0),  # the first: one call more than needed counts as 1
    ]
    (tmp_path / "0.jsonl").write_text("".join(json.dumps(
        {"input": f"Q{i}", "output": "", "gts": "1", "score": acc, "step": 0, "ref_ops": ops,
         **scored(acc, acc, calls, "1" if acc else "")}) + "\n" for i, (ops, acc, calls) in enumerate(lines)))
    proc = subprocess.run([*command("gsm8k-eval-summary"), "--validation_dir", str(tmp_path)],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert [summary[f"answers_ops{k}"] for k in (1, 2, 3)] == [2, 3, 3]
    assert [summary[f"strict_acc_ops{k}"] for k in (1, 2, 3)] == pytest.approx([1 / 2, 2 / 3, 1 / 3])
    assert [summary[f"tool_calls_per_answer_ops{k}"] for k in (1, 2, 3)] == pytest.approx([0.5, 5 / 3, 5 / 3])
    assert summary["correct_multi_op_answers"] == 3 and summary["calls_per_op"] == pytest.approx((1 + 0.5 + 1) / 3)
    assert "| strict_acc_ops3 | 0.3333 |" in (tmp_path / "summary.md").read_text()


def test_a_dump_without_the_rewards_keys_is_refused_not_rescored(tmp_path):
    (tmp_path / "0.jsonl").write_text(json.dumps({"input": "Q", "output": "#### 1", "gts": "1", "score": 1}) + "\n")
    proc = subprocess.run([*command("gsm8k-eval-summary"), "--validation_dir", str(tmp_path)],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and "a dump line has no acc_strict" in proc.stderr, proc.stderr
    assert not (tmp_path / "summary.json").exists()


def model_folder(path: Path, exported_from: tuple[str, int] | None = None) -> Path:
    """A model folder as the preflight checks it (config.json), and what gsm8k-export-checkpoint records."""
    from recipes.export.provenance import write_record

    path.mkdir(parents=True)
    (path / "config.json").write_text("{}")
    if exported_from:
        experiment, step = exported_from
        write_record(path, path.parent / "checkpoints" / f"global_step_{step}" / "actor", experiment, step)
    return path


def test_cpu_eval_runs_on_the_cpu_stand_ins_without_steering(prepared_data_dir, tmp_path):
    """DEVICE=cpu: the CPU profile, no steered turns (the rollout server writes none of the model's answers)."""
    proc = eval_dry_run(prepared_data_dir, DEVICE="cpu", MODEL_PATH=str(model_folder(tmp_path / "tiny")))
    assert proc.returncode == 0, proc.stderr
    command = shlex.split([line for line in proc.stdout.splitlines() if "recipes.trainer.main_ppo" in line][-1])
    for override in ("profile=cpu_smoke", "++actor_rollout_ref.rollout.engine_kwargs.hf_cpu.steer_every=0",
                     "trainer.val_only=True", "actor_rollout_ref.rollout.val_kwargs.temperature=0"):
        assert override in command
    steer = [c for c in command if "steer_every" in c]
    assert steer[-1].endswith("=0"), "no later override turns steering back on"
    assert "recipes.results.summary --validation_dir" in proc.stdout
    hardware = next(line for line in proc.stdout.splitlines() if line.startswith("#   hardware"))
    assert "CPU rank(s)" in hardware and "GPU(s)" not in hardware, hardware


def test_cpu_eval_launch_passes_the_gpu_checks(prepared_data_dir, tmp_path):
    """A real launch-mode preflight (made to fail on W&B credentials, so nothing starts): on CPU it must not
    stop at counting GPUs, as it did before DEVICE=cpu existed."""
    proc = eval_dry_run(prepared_data_dir, DEVICE="cpu", DRY_RUN="0", MODEL_PATH=str(model_folder(tmp_path / "tiny")),
                        LOGGER="console,wandb", HOME="/nonexistent", PROFILE="cpu_smoke")
    assert proc.returncode != 0 and "need W&B credentials" in proc.stderr, proc.stderr[-2000:]
    assert "cannot count GPUs" not in proc.stderr and "GPU(s) visible" not in proc.stderr


def test_unknown_device_is_refused(prepared_data_dir):
    proc = eval_dry_run(prepared_data_dir, DEVICE="tpu")
    assert proc.returncode == 1 and "DEVICE must be gpu or cpu, not 'tpu'" in proc.stderr


def test_an_earlier_steps_summary_never_replaces_the_latest(tmp_path):
    """summary.json is the latest step's; --step N of an earlier step writes summary_step<N>.json and says so."""
    for step, pred in ((0, "41"), (2, "42")):
        right = float(pred == "42")
        (tmp_path / f"{step}.jsonl").write_text(json.dumps({"input": "Q", "output": f"#### {pred}", "gts": "42",
                                                            "score": right, "step": step,
                                                            **scored(right, right, 0, pred)}) + "\n")

    def summary(*args):
        proc = subprocess.run([*command("gsm8k-eval-summary"), "--validation_dir", str(tmp_path), *args],
                              cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    summary()
    out = summary("--step", "0")
    assert f"step 0 is not the latest (2): written to {tmp_path}/summary_step0.json" in out
    latest, step0 = (json.loads((tmp_path / name).read_text()) for name in ("summary.json", "summary_step0.json"))
    assert (latest["step"], latest["strict_acc"]) == (2, 1.0) and (step0["step"], step0["strict_acc"]) == (0, 0.0)


def test_the_plan_of_an_evaluation_shows_no_training(pass_at_4_dry_run):
    proc, _ = pass_at_4_dry_run
    plan = {line.split(None, 2)[1]: line.split(None, 2)[2] for line in proc.stdout.splitlines()
            if line.startswith("#   ")}
    assert plan["batch"].startswith("validation only: 4 sample(s) per prompt at temperature 1.0; prompt/response")
    assert plan["schedule"].startswith("validation only (trainer.val_only)")
    # what it scores, whatever the profile: the questions, the samples, the length
    assert plan["validate"] == "all 4 questions x 4 sample(s) at temperature 1.0, up to 1024 response tokens and 5 " \
                               "assistant turns"
    assert "trajectories per step" not in proc.stdout and "epoch" not in proc.stdout


def test_evaluations_of_different_exports_get_their_own_names(tmp_path):
    """Every export used to be evaluated as eval_hf_default_tools, in one folder and under one Weave name."""
    from recipes.export.provenance import eval_name

    names = {eval_name(str(model_folder(tmp_path / run / f"step{step}" / "hf", (run, step))), "calculator")
             for run, step in (("gsm8k_a", 20), ("gsm8k_a", 40), ("gsm8k_b", 40))}
    assert names == {"eval_gsm8k_a_step20_calculator", "eval_gsm8k_a_step40_calculator",
                     "eval_gsm8k_b_step40_calculator"}
    assert eval_name("Qwen/Qwen2.5-3B-Instruct", "none") == "eval_Qwen2.5-3B-Instruct_none"
    assert eval_name("Qwen/Qwen2.5-3B-Instruct", "none", "8", "1.0") == "eval_Qwen2.5-3B-Instruct_none_n8_t1.0"


def test_the_eval_names_its_run_after_the_export(prepared_data_dir, tmp_path):
    model = model_folder(tmp_path / "outputs" / "gsm8k_a" / "hf", ("gsm8k_a", 40))
    proc = eval_dry_run(prepared_data_dir, MODEL_PATH=str(model))
    assert proc.returncode == 0, proc.stderr
    command = shlex.split([line for line in proc.stdout.splitlines() if "recipes.trainer.main_ppo" in line][-1])
    assert "trainer.experiment_name=eval_gsm8k_a_step40_default_tools" in command
    assert f"trainer.validation_data_dir={REPO_ROOT}/outputs/eval_gsm8k_a_step40_default_tools/validation" in command


def test_a_second_evaluation_into_the_same_folder_is_refused(prepared_data_dir, tmp_path, pass_at_4_dry_run):
    """verl rewrites 0.jsonl: without the refusal the second evaluation silently replaced the first."""
    earlier = tmp_path / "ev" / "validation" / "0.jsonl"
    earlier.parent.mkdir(parents=True)
    earlier.write_text(EARLIER)
    for dry_run in ("1", "0"):
        proc = eval_dry_run(prepared_data_dir, OUTPUT_DIR=str(tmp_path / "ev"), EXPERIMENT_NAME="ev", DRY_RUN=dry_run)
        assert proc.returncode == 1 and f"{earlier.parent} already holds an evaluation" in proc.stderr, proc.stderr
        assert "OVERWRITE=1 to replace it" in proc.stderr and "main_ppo" not in proc.stdout + proc.stderr
    assert earlier.read_text() == EARLIER
    proc, out = pass_at_4_dry_run  # the same with OVERWRITE=1: said, and a dry run removes nothing
    assert f"# OVERWRITE=1: the evaluation would first remove the earlier one in {out}/validation" in proc.stdout
    assert (out / "validation" / "0.jsonl").read_text() == EARLIER


def test_overwrite_never_empties_a_validation_folder_no_evaluation_made(prepared_data_dir, tmp_path):
    """OUTPUT_DIR pointed at a training run's outputs: OVERWRITE=1 used to delete its validation dumps."""
    dumps = tmp_path / "run" / "validation"
    dumps.mkdir(parents=True)
    (dumps / "40.jsonl").write_text(EARLIER)
    for dry_run in ("1", "0"):
        proc = eval_dry_run(prepared_data_dir, OUTPUT_DIR=str(tmp_path / "run"), EXPERIMENT_NAME="ev",
                            OVERWRITE="1", DRY_RUN=dry_run)
        assert proc.returncode == 1, proc.stderr
        assert f"error: OUTPUT_DIR/validation={dumps} holds files eval_gsm8k did not make" in proc.stderr
        assert "main_ppo" not in proc.stdout + proc.stderr
    assert (dumps / "40.jsonl").read_text() == EARLIER
