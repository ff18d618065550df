"""What the two learning checks share: their knobs (scripts/learn_knobs.sh, as the scripts export them), how a stage
runs (a process of its own, as a user would run it), and the stages before GRPO: the task through the recipe's data
prep, tools on and tools off; the tokenizer and the small model; the SFT warm start, started again from a new init
when its tool-only phase gets stuck; and the verdict from three score summaries. The CPU check's ending is
pipeline.py, the GPU check's gpu_pipeline.py."""

from __future__ import annotations

import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, fields
from pathlib import Path
from typing import ClassVar

from harness.learning.sft import NOT_CONVERGED
from recipes import folder_guard
from recipes.constants import REPO_ROOT
from recipes.folder_guard import FolderRefused

TASKS = ("one_step", "chain")


class LearnError(RuntimeError):
    """Stops the check; the message is the one line the user sees (with the step's log tail, where there is one)."""


@dataclass(frozen=True)
class LearnKnobs:
    """The knobs a learning check's script exports, by their shell names in lower case (no defaults here: the scripts
    and scripts/learn_knobs.sh are their home). A check adds its own in a subclass."""

    SCRIPT: ClassVar[str] = ""  # scripts/<SCRIPT>, which sets every knob

    python: str
    task: str
    work_dir: str
    seed: str
    train_rows: str
    test_rows: str
    sft_steps: str
    sft_schedule_steps: str
    sft_tool_only_steps: str
    sft_tool_fraction: str
    sft_max_depth: str
    sft_batch: str
    sft_lr: str
    sft_weight_decay: str
    sft_converged_loss: str
    sft_attempts: str
    grpo_steps: str
    max_turns: str
    response_length: str
    sft_model: str
    eval_temperature: str
    threads: str

    @classmethod
    def from_environ(cls, environ: dict[str, str]):
        missing = [f.name.upper() for f in fields(cls) if f.name.upper() not in environ]
        if missing:
            raise LearnError(f"{', '.join(missing)} not set: run the check as `bash scripts/{cls.SCRIPT}`, which "
                             "sets every knob")
        knobs = cls(**{f.name: environ[f.name.upper()] for f in fields(cls)})
        knobs.check()
        return knobs

    def check(self) -> None:
        if self.task not in TASKS:
            raise LearnError(f"TASK must be one_step or chain, not '{self.task}'")

    @property
    def work(self) -> Path:
        return Path(self.work_dir)

    def sizes(self) -> list[str]:
        """What the task needs beyond the profile's sizes: GRPO and every evaluation get the same."""
        out = []
        if self.max_turns:
            out.append(f"actor_rollout_ref.rollout.multi_turn.max_assistant_turns={self.max_turns}")
        if self.response_length:
            out.append(f"data.max_response_length={self.response_length}")
        return out


def cpu_backend_env() -> dict[str, str]:
    """What scripts/cpu_env.sh sets (the CPU stand-ins' environment), read by sourcing it: GRPO and the evaluations
    on CPU run on it, the SFT does not."""
    out = subprocess.run(["bash", "-c", f". {REPO_ROOT / 'scripts' / 'cpu_env.sh'} && env -0"], env=dict(os.environ),
                         capture_output=True, text=True, check=True).stdout
    after = dict(item.split("=", 1) for item in out.split("\0") if "=" in item)
    return {k: v for k, v in after.items() if os.environ.get(k) != v}


def field(summary: dict, key: str) -> float:
    """A summary's figure as the RESULT line prints it."""
    return round(float(summary.get(key, math.nan)), 4)


class Stages:
    """One run of a check: its environment, its clock, and the stages both checks run. A subclass says where the
    model's shape and the SFT's device come from, and runs the rest."""

    NAME = ""  # the check's log prefix: [learn_cpu], [learn_gpu]
    SHAPE = "cpu"  # small_model's --shape
    sft_device = "cpu"  # sft's --device

    def __init__(self, knobs: LearnKnobs, grpo_args: list[str], extra_env: dict[str, str] | None = None) -> None:
        self.knobs, self.grpo_args = knobs, grpo_args
        self.env = {**os.environ, **(extra_env or {}), "TOKENIZERS_PARALLELISM": "false",
                    "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
                    "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))}
        self.start = time.monotonic()
        self.run_env = self.env
        self.sft_attempts_used = 0

    def log(self, message: str) -> None:
        print(f"[{self.NAME}] {message}", file=sys.stderr, flush=True)

    @property
    def wall(self) -> int:
        return round(time.monotonic() - self.start)

    # ---- running a step -------------------------------------------------------------------------------------------

    def python(self, *args: str, env: dict | None = None, check: bool = True) -> int:
        sys.stdout.flush()
        status = subprocess.call([self.knobs.python, *args], cwd=REPO_ROOT, env=env or self.env)
        if check and status != 0:
            raise LearnError(f"`{' '.join(args[:2])}` failed (exit {status})")
        return status

    def logged(self, command: list[str], env: dict, log_file: Path, what: str) -> None:
        """A step whose output goes to its log; on failure its last lines, then the one line."""
        with log_file.open("w") as out:
            status = subprocess.call(command, cwd=REPO_ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
        if status != 0:
            print("\n".join(log_file.read_text(errors="replace").splitlines()[-30:]), file=sys.stderr)
            raise LearnError(f"{what} failed (log above)")

    # ---- the stages before GRPO -----------------------------------------------------------------------------------

    def prepare(self) -> None:
        """WORK_DIR cleared (an SFT_MODEL inside it kept), the task, its data prep tools on and tools off. Only a
        WORK_DIR the check made (or a new or empty one) is cleared: recipes/folder_guard.py."""
        k = self.knobs
        if k.sft_model and not (Path(k.sft_model) / "config.json").is_file():
            raise LearnError(f"SFT_MODEL={k.sft_model} is not a model folder (no config.json); nothing was changed")
        try:
            folder_guard.checked(k.work_dir, self.NAME, "WORK_DIR")
        except FolderRefused as err:
            raise LearnError(str(err)) from None
        kept = None
        if k.sft_model:  # set aside before WORK_DIR is cleared: it may lie inside the last run's
            kept = Path(tempfile.mkdtemp(prefix=f"{self.NAME}_sft."))
            shutil.copytree(k.sft_model, kept, dirs_exist_ok=True)
        folder_guard.clear(k.work_dir, self.NAME, "WORK_DIR")
        if kept is not None:
            shutil.move(str(kept), k.work / "model_sft")
        self.python("-m", "harness.learning.task", "--task", k.task, "--out_dir", str(k.work / "task"),
                    "--train_size", k.train_rows, "--test_size", k.test_rows, "--seed", k.seed)
        for folder, extra in (("data", []), ("data_notools", ["--tool_set", "none"])):
            self.python("data_prep/gsm8k.py", "--input_dir", str(k.work / "task"), "--local_save_dir",
                        str(k.work / folder), *extra)

    def build_model(self, seed: str) -> Path:
        """The tokenizer (trained on the prepared rows) and a random model of the check's shape: WORK_DIR/model_init."""
        k = self.knobs
        shutil.rmtree(k.work / "model_init", ignore_errors=True)
        self.python("-m", "harness.learning.small_model", "--data_dir", str(k.work / "data"),
                    "--out_dir", str(k.work / "model_init"), "--seed", seed, "--shape", self.SHAPE)
        self.model_built(k.work / "model_init")
        return k.work / "model_init"

    def model_built(self, folder: Path) -> None:
        """Called with each model folder the check makes or is given, before it is trained: a check's own test."""

    def warm_start(self) -> None:
        """The SFT, from a new init (seed SEED+1000*attempt) each time the last one got stuck before it copies the
        tool's result: more steps do not unstick it, a fresh init does."""
        k = self.knobs
        if k.sft_model:
            self.log(f"SFT: skipped, starting from {k.sft_model}")
            self.model_built(k.work / "model_sft")
            return
        attempts = int(k.sft_attempts)
        for attempt in range(attempts):
            init_seed = str(int(k.seed) + 1000 * attempt)
            shutil.rmtree(k.work / "model_sft", ignore_errors=True)
            self.build_model(init_seed)
            self.log(f"SFT attempt {attempt + 1}/{attempts} (init seed {init_seed}) on {self.sft_device}: "
                     f"{k.sft_steps} steps x {k.sft_batch}")
            status = self.python(
                "-m", "harness.learning.sft", "--model_dir", str(k.work / "model_init"), "--data_dir",
                str(k.work / "data"), "--out_dir", str(k.work / "model_sft"), "--steps", k.sft_steps,
                "--batch_size", k.sft_batch, "--lr", k.sft_lr, "--weight_decay", k.sft_weight_decay,
                "--seed", init_seed, "--tool_only_steps", k.sft_tool_only_steps, "--tool_fraction",
                k.sft_tool_fraction, "--converged_loss", k.sft_converged_loss, "--max_depth", k.sft_max_depth,
                "--threads", k.threads, "--schedule_steps", k.sft_schedule_steps or k.sft_steps,
                "--device", self.sft_device, check=False)
            if status == 0:
                self.sft_attempts_used = attempt + 1
                return
            if status != NOT_CONVERGED:
                raise LearnError(f"SFT failed (exit {status})")
            self.log(f"SFT attempt {attempt + 1} stuck: restarting from a new init")
        raise LearnError(f"the SFT did not converge in {attempts} attempts (tool-only loss above "
                         f"{k.sft_converged_loss}); raise SFT_TOOL_ONLY_STEPS or SFT_ATTEMPTS, or try another SEED")

    # ---- after GRPO -----------------------------------------------------------------------------------------------

    def rollout_report(self, outputs: Path) -> None:
        """Plots and a summary of the training rollouts and validations; a failure is a note, the scores stand."""
        if self.python("-m", "recipes.results.rollout_report", "--rollout_dir", str(outputs / "rollouts"),
                       "--validation_dir", str(outputs / "validation"), "--out", str(outputs / "report"),
                       env=self.run_env, check=False):
            self.log("rollout report failed (see above); the scores stand")

    def verdict(self, sft: Path, final: Path, tools_off: Path) -> None:
        """The verdict (verdict.py) from three score summaries: its `[verdict]` lines and `VERDICT PASS|FAIL`."""
        k = self.knobs
        out = subprocess.run([k.python, "-m", "harness.learning.verdict", "--task", k.task, "--sft", str(sft),
                              "--final", str(final), "--tools_off", str(tools_off)],
                             cwd=REPO_ROOT, env=self.run_env, capture_output=True, text=True)
        print(out.stdout + out.stderr, file=sys.stderr, end="", flush=True)


def run_check(check: type[Stages], knobs: type[LearnKnobs], argv: list[str] | None = None,
              environ: dict[str, str] | None = None) -> int:
    """A check's command: its knobs from the environment, hydra overrides for GRPO from argv; a LearnError ends it
    with its one line."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        return check(knobs.from_environ(dict(os.environ if environ is None else environ)), argv).run()
    except LearnError as err:
        print(f"[{check.NAME}] error: {err}", file=sys.stderr)
        return 1
