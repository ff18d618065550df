"""scripts/export_checkpoint.py checks everything before it runs verl's model merger."""

import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]


def export(*args):
    return subprocess.run([sys.executable, "scripts/export_checkpoint.py", *map(str, args)], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=60)


def fake_checkpoint(root: Path, steps=(20, 40), latest=40, complete=True):
    for step in steps:
        actor = root / f"global_step_{step}" / "actor"
        (actor / "huggingface").mkdir(parents=True)
        if complete:
            (actor / "fsdp_config.json").write_text('{"world_size": 8}')
            (actor / "model_world_size_8_rank_0.pt").write_bytes(b"")
    if latest is not None:
        (root / "latest_checkpointed_iteration.txt").write_text(str(latest))
    return root


def test_latest_step_and_the_exact_merger_command(tmp_path):
    root = fake_checkpoint(tmp_path / "ckpt")
    proc = export(root, "--target_dir", tmp_path / "hf", "--dry_run")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1].endswith(
        f"-m verl.model_merger merge --backend fsdp --local_dir {root}/global_step_40/actor --target_dir {tmp_path}/hf")
    proc = export(root, "--target_dir", tmp_path / "hf", "--step", "20", "--dry_run")
    assert f"{root}/global_step_20/actor" in proc.stdout


@pytest.mark.parametrize(
    "setup, args, message",
    [
        (lambda r: None, (), "does not exist (trainer.default_local_dir"),
        (lambda r: r.mkdir(), (), "no global_step_* folders"),
        (lambda r: fake_checkpoint(r), ("--step", "60"), "global_step_60/actor does not exist; available"),
        (lambda r: fake_checkpoint(r, complete=False), (), "is not a complete FSDP actor checkpoint"),
    ],
)
def test_bad_arguments_fail_before_anything_runs(tmp_path, setup, args, message):
    root = tmp_path / "ckpt"
    setup(root)
    proc = export(root, "--target_dir", tmp_path / "hf", *args)
    assert proc.returncode == 1 and message in proc.stderr


def test_a_non_empty_target_needs_force(tmp_path):
    root = fake_checkpoint(tmp_path / "ckpt")
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "config.json").write_text("{}")
    assert "exists and is not empty" in export(root, "--target_dir", tmp_path / "hf", "--dry_run").stderr
    assert export(root, "--target_dir", tmp_path / "hf", "--dry_run", "--force").returncode == 0


def test_the_merger_cli_takes_these_arguments():
    proc = subprocess.run([sys.executable, "-m", "verl.model_merger", "merge", "--help"], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0
    for flag in ("--backend {fsdp,megatron}", "--local_dir", "--target_dir"):
        assert flag in proc.stdout
