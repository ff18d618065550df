"""No knob deletes what the recipe did not make: recipes/folder_guard.py on real folders (a fake HOME, the checkout
through a symlink, `.` and `..`, a user's files, a folder the recipe made), and every script that empties a folder
a knob names asking it first (learn_cpu.sh, learn_gpu.sh, smoke_cpu.sh, check_gpu_kernels.sh, eval_gsm8k.sh):
refused in one line, with nothing touched and nothing run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from recipes import folder_guard
from recipes.constants import REPO_ROOT
from recipes.folder_guard import MARKER, FolderRefused

pytestmark = pytest.mark.integration


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    """A fake home folder (tmp/home) as $HOME; the folders the tests clear lie beside it, in tmp/work..."""
    fake = tmp_path / "home"
    (fake / ".cache" / "models").mkdir(parents=True)
    (fake / ".cache" / "models" / "weights.bin").write_bytes(b"a user's model")
    monkeypatch.setenv("HOME", str(fake))
    return fake


def user_folder(path: Path) -> Path:
    path.mkdir(parents=True)
    (path / "notes.txt").write_text("a user's file")
    return path


def refusal(path, maker="learn_cpu", knob="WORK_DIR") -> str:
    with pytest.raises(FolderRefused) as err:
        folder_guard.clear(path, maker, knob)
    message = str(err.value)
    assert "\n" not in message
    return message


def test_a_new_folder_is_made_and_marked_and_emptied_next_time(home, tmp_path):
    work = tmp_path / "work"
    assert folder_guard.clear(work, "learn_cpu") == work
    assert [p.name for p in work.iterdir()] == [MARKER] and folder_guard.maker_of(work) == "learn_cpu"
    (work / "model").mkdir()
    (work / "model" / "weights.bin").write_bytes(b"x")
    (work / "scores.jsonl").write_text("{}")
    folder_guard.clear(work, "learn_cpu")
    assert [p.name for p in work.iterdir()] == [MARKER]


def test_an_empty_folder_is_taken(home, tmp_path):
    (tmp_path / "empty").mkdir()
    folder_guard.clear(tmp_path / "empty", "smoke_cpu")
    assert folder_guard.maker_of(tmp_path / "empty") == "smoke_cpu"


def test_a_folder_with_a_users_file_is_refused_and_kept(home, tmp_path):
    work = user_folder(tmp_path / "work")
    message = refusal(work)
    assert message.startswith(f"WORK_DIR={work} holds files learn_cpu did not make")
    assert "delete this one yourself" in message
    assert (work / "notes.txt").read_text() == "a user's file" and not (work / MARKER).exists()


def test_a_folder_another_command_made_is_refused(home, tmp_path):
    folder_guard.clear(tmp_path / "run", "smoke_cpu")
    (tmp_path / "run" / "checkpoints").mkdir()
    assert "was made by smoke_cpu, not learn_cpu" in refusal(tmp_path / "run")
    assert (tmp_path / "run" / "checkpoints").is_dir()


@pytest.mark.parametrize("given", [".", "..", "work", "./work", "~/work", ""])
def test_a_relative_path_is_refused(home, tmp_path, monkeypatch, given):
    monkeypatch.chdir(user_folder(tmp_path / "cwd"))
    message = refusal(given)
    assert "relative path" in message or "is empty" in message
    assert (tmp_path / "cwd" / "notes.txt").exists()


def test_the_home_folder_and_what_holds_it_are_refused_even_when_marked(home, tmp_path):
    folder_guard.mark(home, "learn_cpu")  # a marker planted in $HOME does not make it the recipe's
    assert refusal(home) == (f"WORK_DIR={home} is your home folder, and learn_cpu empties it: give it a folder of "
                             "its own, e.g. /tmp/<name>")
    assert f"holds {home}, which is your home folder" in refusal(tmp_path)
    assert f"holds {home}, which is your home folder" in refusal(str(home / ".cache" / ".." / ".."))
    assert (home / ".cache" / "models" / "weights.bin").exists()


def test_a_folder_inside_home_is_judged_by_its_contents(home):
    assert "did not make" in refusal(home / ".cache", maker="check_gpu_kernels", knob="CACHES")
    assert (home / ".cache" / "models" / "weights.bin").read_bytes() == b"a user's model"


def test_the_root_and_the_checkout_are_refused_also_through_a_symlink(home, tmp_path):
    assert "is the root of the file system" in refusal("/")
    (tmp_path / "link").symlink_to(REPO_ROOT)
    assert f"WORK_DIR={tmp_path / 'link'} is the recipe's checkout" in refusal(tmp_path / "link")
    assert "which is the recipe's checkout" in refusal(REPO_ROOT.parent)
    assert (REPO_ROOT / ".git").exists()


def test_a_file_is_refused(home, tmp_path):
    (tmp_path / "file").write_text("x")
    assert "is a file, not a folder" in refusal(tmp_path / "file")
    assert (tmp_path / "file").read_text() == "x"


def test_a_marker_that_is_a_symlink_does_not_count(home, tmp_path):
    folder_guard.clear(tmp_path / "made", "learn_cpu")
    work = user_folder(tmp_path / "work")
    (work / MARKER).symlink_to(tmp_path / "made" / MARKER)
    assert "marker that is not a file of yours" in refusal(work)


def test_clearing_never_follows_a_symlink_out_of_the_folder(home, tmp_path):
    outside = user_folder(tmp_path / "outside")
    work = folder_guard.clear(tmp_path / "work", "learn_cpu")
    (work / "to_outside").symlink_to(outside)
    folder_guard.clear(work, "learn_cpu")
    assert not (work / "to_outside").exists() and (outside / "notes.txt").exists()


def test_remove_deletes_only_an_empty_or_own_folder(home, tmp_path):
    folder_guard.remove(tmp_path / "absent", "small_model")
    (tmp_path / "empty").mkdir()
    folder_guard.remove(tmp_path / "empty", "small_model")
    assert not (tmp_path / "empty").exists()
    with pytest.raises(FolderRefused, match="did not make"):
        folder_guard.remove(user_folder(tmp_path / "model"), "small_model", "--out_dir")
    assert (tmp_path / "model" / "notes.txt").exists()


def test_the_command_line_says_one_line_and_touches_nothing(home, tmp_path):
    work = user_folder(tmp_path / "work")
    env = {**os.environ, "HOME": str(home), "PYTHONPATH": str(REPO_ROOT)}
    proc = subprocess.run([sys.executable, "-m", "recipes.folder_guard", "clear", "--made-by", "smoke_cpu", "--knob",
                           "OUTPUT_DIR", str(work)], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith(f"error: OUTPUT_DIR={work} holds files smoke_cpu did not make")
    assert (work / "notes.txt").exists()
    proc = subprocess.run([sys.executable, "-m", "recipes.folder_guard", "clear", "--made-by", "smoke_cpu",
                           str(tmp_path / "new")], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and folder_guard.maker_of(tmp_path / "new") == "smoke_cpu"


# ---- the scripts ---------------------------------------------------------------------------------------------


def stub_python(tmp_path: Path) -> Path:
    """An interpreter standing in for the project's: the recipe's own Python modules a script runs first (the
    learning pipelines, the folder guard) run for real; anything else (a model build, data prep, a training
    launch) is only recorded in calls.txt, so a test sees whether a script got past its guard."""
    stub = tmp_path / "python"
    stub.write_text("#!/bin/bash\n"
                    'if [ "$1" = -c ]; then exit 0; fi\n'
                    'case "$1 $2" in "-m harness.learning"|"-m harness.learning.gpu_pipeline"|'
                    '"-m recipes.folder_guard") '
                    f'exec {sys.executable} "$@" ;; esac\n'
                    f'echo "$*" >> {tmp_path / "calls.txt"}\n'
                    'exit 0\n')
    stub.chmod(0o755)
    return stub


def run_script(script: str, tmp_path: Path, home: Path, **env) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("OUTPUT_DIR", "WORK_DIR", "TRACE_SPOOL"))}
    return subprocess.run(["bash", str(REPO_ROOT / "scripts" / script)], capture_output=True, text=True, timeout=120,
                          cwd=REPO_ROOT, env={**base, "HOME": str(home), "PYTHON": str(stub_python(tmp_path)), **env})


def nothing_ran(tmp_path: Path) -> bool:
    return not (tmp_path / "calls.txt").exists()


@pytest.mark.parametrize("script", ["learn_cpu.sh", "learn_gpu.sh"])
def test_a_learning_check_keeps_a_work_dir_it_did_not_make(home, tmp_path, script):
    work = user_folder(tmp_path / "work")
    proc = run_script(script, tmp_path, home, WORK_DIR=str(work), DEVICE="cpu")
    name = script.removesuffix(".sh")
    assert proc.returncode == 1, proc.stderr
    assert f"[{name}] error: WORK_DIR={work} holds files {name} did not make" in proc.stderr
    assert (work / "notes.txt").read_text() == "a user's file" and nothing_ran(tmp_path)


@pytest.mark.parametrize("work_dir", [".", "..", "HOME"])
def test_a_learning_check_refuses_the_checkout_and_home(home, tmp_path, work_dir):
    work = str(home) if work_dir == "HOME" else work_dir
    proc = run_script("learn_cpu.sh", tmp_path, home, WORK_DIR=work)
    assert proc.returncode == 1 and f"[learn_cpu] error: WORK_DIR={work} is" in proc.stderr, proc.stderr
    assert (REPO_ROOT / ".git").exists() and (home / ".cache" / "models" / "weights.bin").exists()
    assert nothing_ran(tmp_path)


def real_run_outputs(folder: Path) -> Path:
    """What a training run leaves in its OUTPUT_DIR: a checkpoint and traces not yet uploaded."""
    (folder / "checkpoints" / "global_step_40").mkdir(parents=True)
    (folder / "checkpoints" / "global_step_40" / "model.pt").write_bytes(b"40 steps of training")
    (folder / "trace_spool").mkdir()
    (folder / "trace_spool" / "0.spool").write_bytes(b"traces")
    return folder


def test_the_smoke_keeps_a_real_runs_output_dir(home, tmp_path):
    """An OUTPUT_DIR still exported from a real run's shell: the smoke used to delete its checkpoints and spool."""
    out = real_run_outputs(tmp_path / "run")
    proc = run_script("smoke_cpu.sh", tmp_path, home, WORK_DIR=str(tmp_path / "smoke"), OUTPUT_DIR=str(out))
    assert proc.returncode == 1 and f"error: OUTPUT_DIR={out} holds files smoke_cpu did not make" in proc.stderr
    assert (out / "checkpoints" / "global_step_40" / "model.pt").exists() and (out / "trace_spool" / "0.spool").exists()
    assert nothing_ran(tmp_path)


def test_the_multinode_smoke_keeps_a_real_runs_trace_spool(home, tmp_path):
    spool = real_run_outputs(tmp_path / "run") / "trace_spool"
    proc = run_script("smoke_cpu.sh", tmp_path, home, WORK_DIR=str(tmp_path / "smoke"), NODES="2",
                      TRACE_SPOOL=str(spool))
    assert proc.returncode == 1 and f"error: TRACE_SPOOL={spool} holds files smoke_cpu did not make" in proc.stderr
    assert (spool / "0.spool").exists() and nothing_ran(tmp_path)


def test_the_smoke_refuses_a_work_dir_it_did_not_make(home, tmp_path):
    """Its model is rebuilt at WORK_DIR/model: WORK_DIR=$HOME once replaced a user's ~/model."""
    proc = run_script("smoke_cpu.sh", tmp_path, home, WORK_DIR=str(home))
    assert proc.returncode == 1 and f"error: WORK_DIR={home} is your home folder" in proc.stderr, proc.stderr
    assert nothing_ran(tmp_path)


def test_the_smoke_empties_its_own_output_dir(home, tmp_path):
    folder_guard.claim(tmp_path / "smoke", "smoke_cpu")  # as the smoke's last run left them
    out = folder_guard.clear(tmp_path / "smoke" / "outputs", "smoke_cpu")
    (out / "checkpoints").mkdir()
    proc = run_script("smoke_cpu.sh", tmp_path, home, WORK_DIR=str(tmp_path / "smoke"), RESUME_CHECK="0")
    assert not (out / "checkpoints").exists(), proc.stderr
    assert folder_guard.maker_of(out) == "smoke_cpu" and not nothing_ran(tmp_path)


def test_the_kernel_check_keeps_a_cache_folder_it_did_not_make(home, tmp_path):
    """CACHES=~/.cache would have wiped a user's model caches (after the GPU env's install); refused first."""
    proc = subprocess.run(["bash", str(REPO_ROOT / "scripts" / "check_gpu_kernels.sh")], capture_output=True,
                          text=True, timeout=120, env={**os.environ, "HOME": str(home), "BASE_PYTHON": sys.executable,
                                                       "CACHES": str(home / ".cache"), "VENV": str(tmp_path / "env")})
    assert proc.returncode == 1, proc.stderr
    assert f"CACHES={home / '.cache'} holds files check_gpu_kernels did not make" in proc.stderr
    assert "installing" not in proc.stdout and not (tmp_path / "env").exists()
    assert (home / ".cache" / "models" / "weights.bin").exists()
