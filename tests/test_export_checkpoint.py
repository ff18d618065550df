"""gsm8k-export-checkpoint checks everything before it runs the model merger, and the exported model holds
the weights that were trained: same dtype, same bits, readable as the umask allows."""

import json
import os
import stat
import subprocess
from pathlib import Path

import pytest
import torch

from testkit.commands import command
from testkit.model_folder import assert_carries_transformers_version

pytestmark = pytest.mark.integration

REPO_ROOT = Path(__file__).resolve().parents[1]


def export(*args):
    return subprocess.run([*command("gsm8k-export-checkpoint"), *map(str, args)], cwd=REPO_ROOT,
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
        f"-m recipes.export.merge_fsdp --local_dir {root}/global_step_40/actor --target_dir {tmp_path}/hf "
        "--dtype checkpoint")
    proc = export(root, "--target_dir", tmp_path / "hf", "--step", "20", "--dry_run")
    assert f"{root}/global_step_20/actor" in proc.stdout


def test_the_experiment_is_the_launchs_own_name(tmp_path):
    """The launcher keeps hydra's config of each launch in <OUTPUT_DIR>/hydra/<time>/.hydra/: the latest one that
    saved into these checkpoints names the experiment, whatever the folder is called."""
    from recipes.export.provenance import experiment_of

    root = fake_checkpoint(tmp_path / "run" / "checkpoints")
    assert experiment_of(root) == "run"  # no launcher config: the run folder's name
    for stamp, experiment, saved_to in (("2026-01-01_10-00-00", "old_name", root), ("2026-01-02_10-00-00", "exp", root),
                                        ("2026-01-03_10-00-00", "other", tmp_path / "elsewhere")):
        config = tmp_path / "run" / "hydra" / stamp / ".hydra" / "config.yaml"
        config.parent.mkdir(parents=True)
        config.write_text(f"trainer:\n  experiment_name: {experiment}\n  default_local_dir: {saved_to}\n")
    assert experiment_of(root) == "exp"
    proc = export(root, "--target_dir", tmp_path / "hf", "--dry_run")
    assert f"[export] checkpoint {root}/global_step_40/actor (experiment exp, step 40)" in proc.stdout
    assert not (tmp_path / "hf").exists()  # a dry run writes nothing


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


@pytest.fixture(scope="module")
def fsdp_checkpoint(tmp_path_factory):
    """A real 2-rank FSDP2 checkpoint of a tiny fp32 model, written by verl's FSDPCheckpointManager, and the
    full weights it was made from."""
    from testkit.fsdp_checkpoint import write_fsdp_checkpoint

    root = tmp_path_factory.mktemp("fsdp") / "checkpoints"
    write_fsdp_checkpoint(root / "global_step_1" / "actor")
    (root / "latest_checkpointed_iteration.txt").write_text("1")
    return root, torch.load(root / "global_step_1" / "reference_weights.pt")


def test_the_export_holds_the_trained_fp32_weights_bit_for_bit_and_is_readable(fsdp_checkpoint, tmp_path, capfd):
    """The command's main in this process (tests/test_e2e_cpu.py runs the script as users do); the merger it starts
    is a process of its own, with this process's umask."""
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    from recipes.export.__main__ import main as export_main

    root, trained = fsdp_checkpoint
    target = tmp_path / "hf"
    umask = os.umask(0o027)
    try:
        status = export_main([str(root), "--target_dir", str(target)])
    finally:
        os.umask(umask)
    out = capfd.readouterr().out
    assert status == 0, out[-3000:]
    assert "[export] weights written as float32 (the checkpoint's dtype" in out
    saved = load_file(target / "model.safetensors")
    assert set(saved) == set(trained) - {"lm_head.weight"}  # tied to the embedding
    for name, tensor in saved.items():
        assert tensor.dtype == torch.float32 and torch.equal(tensor, trained[name]), name
    assert json.loads((target / "config.json").read_text())["dtype"] == "float32"
    assert_carries_transformers_version(target)
    loaded = AutoModelForCausalLM.from_pretrained(target)  # as the eval loads it: the config's dtype
    assert all(torch.equal(loaded.state_dict()[k], v) for k, v in trained.items())
    assert stat.S_IMODE((target / "model.safetensors").stat().st_mode) == 0o640  # 0666 minus the umask 027
    # where it came from, for the evaluation's name (no launcher ran: the experiment is the run folder's name)
    record = json.loads((target / "exported_from.json").read_text())
    assert record == {"experiment": root.parent.name, "step": 1, "checkpoint": str(root / "global_step_1" / "actor")}
    assert f"[export] {target}/exported_from.json: experiment {root.parent.name}, step 1" in out


def test_dtype_bfloat16_casts_on_purpose_and_says_so(fsdp_checkpoint, tmp_path, capsys):
    from safetensors.torch import load_file

    from recipes.export import merge_fsdp

    root, trained = fsdp_checkpoint
    actor = root / "global_step_1" / "actor"
    assert merge_fsdp.main(["--local_dir", str(actor), "--target_dir", str(tmp_path), "--dtype", "bfloat16"]) == 0
    assert "weights written as bfloat16 (cast by --dtype bfloat16" in capsys.readouterr().out
    saved = load_file(tmp_path / "model.safetensors")
    assert all(torch.equal(t, trained[k].to(torch.bfloat16)) for k, t in saved.items())
    assert json.loads((tmp_path / "config.json").read_text())["dtype"] == "bfloat16"


class _RunsCode:
    """What a checkpoint from elsewhere could hold: an object whose unpickling calls a function (here it only opens
    a file for writing, which creates it)."""

    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return (open, (self.path, "w"))


def test_a_shard_that_would_run_code_is_refused_in_one_line_and_runs_nothing(fsdp_checkpoint, tmp_path, capsys):
    """The shards are loaded as data (weights_only=True, DTensors allow-listed): a pickle with a __reduce__ used to
    run on export (weights_only=False)."""
    import shutil

    from recipes.export import merge_fsdp

    root, _ = fsdp_checkpoint
    actor = tmp_path / "actor"
    shutil.copytree(root / "global_step_1" / "actor", actor)
    ran = tmp_path / "ran"
    shard = actor / "model_world_size_2_rank_0.pt"
    state = merge_fsdp.load_shard(shard)  # a real shard, as data
    state["model.norm.weight"] = _RunsCode(ran)
    torch.save(state, shard)
    status = merge_fsdp.main(["--local_dir", str(actor), "--target_dir", str(tmp_path / "hf")])
    err = capsys.readouterr().err
    assert status == 1 and not ran.exists()
    line = [line for line in err.splitlines() if line.startswith("[export] error:")]
    assert line == [f"[export] error: {shard} holds more than weights, so it was not loaded (it names io.open); a "
                    "checkpoint verl saved holds only tensors and their layout: export only checkpoints from a "
                    "source you trust"], err
    assert not (tmp_path / "hf" / "model.safetensors").exists()
