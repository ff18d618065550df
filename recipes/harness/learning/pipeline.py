"""The CPU learning check's pipeline, `python -m recipes.harness.learning`, as scripts/learn_cpu.sh runs it (that
script holds the knobs and their defaults; it exports them and makes this one call).

Steps, each a process of its own as a user would run it: the task (recipes/harness/learning/task.py) through the
recipe's data prep, tools on and tools off; the SFT warm start (small_model.py, sft.py), started again from a new
init when its tool-only phase gets stuck; the warm start scored through `DEVICE=cpu scripts/eval_gsm8k.sh`; GRPO
through scripts/run_gsm8k_grpo.sh (PROFILE=cpu_learn); the final checkpoint exported and scored tools on and off;
the rollout report; the verdict (verdict.py); the RESULT line."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, fields
from pathlib import Path

from recipes.constants import REPO_ROOT
from recipes.harness.learning.sft import NOT_CONVERGED

TASKS = ("one_step", "chain")
CPU_ISAS = ("avx2", "avx512", "native")
EVAL_PROFILE = "cpu_learn"


class LearnError(RuntimeError):
    """Stops the check; the message is the one line the user sees (with the step's log tail, where there is one)."""


@dataclass(frozen=True)
class LearnKnobs:
    """The knobs scripts/learn_cpu.sh exports, by their shell names in lower case (no defaults here: the script is
    their home)."""

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
    cpu_isa: str

    @classmethod
    def from_environ(cls, environ: dict[str, str]) -> LearnKnobs:
        missing = [f.name.upper() for f in fields(cls) if f.name.upper() not in environ]
        if missing:
            raise LearnError(f"{', '.join(missing)} not set: run the check as `bash scripts/learn_cpu.sh`, which "
                             "sets every knob")
        knobs = cls(**{f.name: environ[f.name.upper()] for f in fields(cls)})
        if knobs.task not in TASKS:
            raise LearnError(f"TASK must be one_step or chain, not '{knobs.task}'")
        if knobs.cpu_isa not in CPU_ISAS:
            raise LearnError(f"CPU_ISA must be avx2, avx512 or native, not '{knobs.cpu_isa}'")
        return knobs

    @property
    def work(self) -> Path:
        return Path(self.work_dir)

    @property
    def experiment(self) -> str:
        return f"gsm8k_cpu_learn_{self.task}_seed{self.seed}"

    def sizes(self) -> list[str]:
        """What the task needs beyond the profile's sizes: GRPO and every evaluation get the same."""
        out = []
        if self.max_turns:
            out.append(f"actor_rollout_ref.rollout.multi_turn.max_assistant_turns={self.max_turns}")
        if self.response_length:
            out.append(f"data.max_response_length={self.response_length}")
        return out


def log(message: str) -> None:
    print(f"[learn_cpu] {message}", file=sys.stderr, flush=True)


def kernel_pins(cpu_isa: str) -> dict[str, str]:
    """The instruction set torch's and MKL's CPU kernels use in every process of the run: with it pinned, a seed gives
    the same warm start on any x86-64 CPU that has it; native: the CPU's best."""
    if cpu_isa == "native":
        return {}
    return {"ATEN_CPU_CAPABILITY": cpu_isa, "MKL_CBWR": cpu_isa.upper(), "MKL_ENABLE_INSTRUCTIONS": cpu_isa.upper()}


def cpu_backend_env() -> dict[str, str]:
    """What scripts/cpu_env.sh sets (the CPU stand-ins' environment), read by sourcing it: GRPO and the evaluations
    run on it, the SFT does not."""
    out = subprocess.run(["bash", "-c", f". {REPO_ROOT / 'scripts' / 'cpu_env.sh'} && env -0"], env=dict(os.environ),
                         capture_output=True, text=True, check=True).stdout
    after = dict(item.split("=", 1) for item in out.split("\0") if "=" in item)
    return {k: v for k, v in after.items() if os.environ.get(k) != v}


class Pipeline:
    def __init__(self, knobs: LearnKnobs, grpo_args: list[str]) -> None:
        self.knobs, self.grpo_args = knobs, grpo_args
        self.env = {**os.environ, **kernel_pins(knobs.cpu_isa), "TOKENIZERS_PARALLELISM": "false",
                    "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
                    "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))}
        self.start = time.monotonic()
        self.run_env = self.env
        self.sft_attempts_used = 0

    # ---- running a step -------------------------------------------------------------------------------------------

    def python(self, *args: str, env: dict | None = None, check: bool = True) -> int:
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

    # ---- the steps ------------------------------------------------------------------------------------------------

    def prepare(self) -> None:
        k = self.knobs
        kept = None
        if k.sft_model:  # checked and set aside before WORK_DIR is cleared: it may lie inside the last run's
            if not (Path(k.sft_model) / "config.json").is_file():
                raise LearnError(f"SFT_MODEL={k.sft_model} is not a model folder (no config.json); nothing "
                                 "was changed")
            kept = Path(tempfile.mkdtemp(prefix="learn_cpu_sft."))
            shutil.copytree(k.sft_model, kept, dirs_exist_ok=True)
        shutil.rmtree(k.work, ignore_errors=True)
        k.work.mkdir(parents=True)
        if kept is not None:
            shutil.move(str(kept), k.work / "model_sft")
        self.python("-m", "recipes.harness.learning.task", "--task", k.task, "--out_dir", str(k.work / "task"),
                    "--train_size", k.train_rows, "--test_size", k.test_rows, "--seed", k.seed)
        for folder, extra in (("data", []), ("data_notools", ["--tool_set", "none"])):
            self.python("data_prep/gsm8k.py", "--input_dir", str(k.work / "task"), "--local_save_dir",
                        str(k.work / folder), *extra)

    def warm_start(self) -> None:
        """The SFT, from a new init (seed SEED+1000*attempt) each time the last one got stuck before it copies the
        tool's result: more steps do not unstick it, a fresh init does."""
        k = self.knobs
        if k.sft_model:
            log(f"SFT: skipped, starting from {k.sft_model}")
            return
        attempts = int(k.sft_attempts)
        for attempt in range(attempts):
            init_seed = str(int(k.seed) + 1000 * attempt)
            for folder in ("model_init", "model_sft"):
                shutil.rmtree(k.work / folder, ignore_errors=True)
            self.python("-m", "recipes.harness.learning.small_model", "--data_dir", str(k.work / "data"),
                        "--out_dir", str(k.work / "model_init"), "--seed", init_seed)
            log(f"SFT attempt {attempt + 1}/{attempts} (init seed {init_seed}): {k.sft_steps} steps x {k.sft_batch}")
            status = self.python(
                "-m", "recipes.harness.learning.sft", "--model_dir", str(k.work / "model_init"), "--data_dir",
                str(k.work / "data"), "--out_dir", str(k.work / "model_sft"), "--steps", k.sft_steps,
                "--batch_size", k.sft_batch, "--lr", k.sft_lr, "--weight_decay", k.sft_weight_decay,
                "--seed", init_seed, "--tool_only_steps", k.sft_tool_only_steps, "--tool_fraction",
                k.sft_tool_fraction, "--converged_loss", k.sft_converged_loss, "--max_depth", k.sft_max_depth,
                "--threads", k.threads, "--schedule_steps", k.sft_schedule_steps or k.sft_steps, check=False)
            if status == 0:
                self.sft_attempts_used = attempt + 1
                return
            if status != NOT_CONVERGED:
                raise LearnError(f"SFT failed (exit {status})")
            log(f"SFT attempt {attempt + 1} stuck: restarting from a new init")
        raise LearnError(f"the SFT did not converge in {attempts} attempts (tool-only loss above "
                         f"{k.sft_converged_loss}); raise SFT_TOOL_ONLY_STEPS or SFT_ATTEMPTS, or try another SEED")

    def evaluate(self, name: str, model: Path, data: Path, tool_set: str) -> dict:
        """The user's CPU eval path (scripts/eval_gsm8k.sh, DEVICE=cpu): its summary, also kept in scores.jsonl."""
        k = self.knobs
        out = k.work / "eval" / name
        env = {**self.run_env, "DEVICE": "cpu", "PROFILE": EVAL_PROFILE, "MODEL_PATH": str(model),
               "DATA_DIR": str(data), "TOOL_SET": tool_set, "OUTPUT_DIR": str(out), "TRACE": "off",
               "VAL_TEMPERATURE": k.eval_temperature, "EXPERIMENT_NAME": f"{k.experiment}_{name}"}
        self.logged(["bash", "scripts/eval_gsm8k.sh", f"actor_rollout_ref.rollout.seed={k.seed}", *k.sizes()],
                    env, out.with_suffix(".log"), f"evaluation {name}")
        summary = json.loads((out / "validation" / "summary.json").read_text())
        line = json.dumps({"eval": name, **summary})
        print(line, flush=True)
        with (k.work / "scores.jsonl").open("a") as scores:
            scores.write(line + "\n")
        return summary

    def grpo(self) -> Path:
        k = self.knobs
        outputs = k.work / "outputs"
        (outputs / "logs").mkdir(parents=True, exist_ok=True)
        log(f"GRPO: {k.grpo_steps} steps through scripts/run_gsm8k_grpo.sh (log {outputs}/logs/train.log)")
        env = {**self.run_env, "PROFILE": EVAL_PROFILE, "MODEL_PATH": str(k.work / "model_sft"),
               "DATA_DIR": str(k.work / "data"), "OUTPUT_DIR": str(outputs), "EXPERIMENT_NAME": k.experiment,
               "CPU_ROLLOUT_EVENTS": str(outputs / "logs" / "rollout_events.jsonl")}
        self.logged(["bash", "scripts/run_gsm8k_grpo.sh", f"trainer.total_training_steps={k.grpo_steps}",
                     f"trainer.save_freq={k.grpo_steps}", f"data.seed={k.seed}",
                     f"actor_rollout_ref.rollout.seed={k.seed}", *k.sizes(), *self.grpo_args],
                    env, outputs / "logs" / "train.log", "GRPO")
        if (outputs / "trace_spool").is_dir():  # TRACE=on: the relay's spool (docs/tracing.md)
            log(f"traces spooled in {outputs}/trace_spool; what W&B has not confirmed goes up with: "
                f"python scripts/upload_traces.py --spool {outputs}/trace_spool")
        return outputs

    def run(self) -> int:
        k = self.knobs
        self.prepare()
        self.warm_start()
        # GRPO and its evaluations: the CPU stand-ins' environment, no W&B cloud
        self.run_env = {**self.env, **cpu_backend_env(), "WANDB_MODE": os.environ.get("WANDB_MODE", "offline"),
                        "WANDB_ERROR_REPORTING": os.environ.get("WANDB_ERROR_REPORTING", "false")}
        (k.work / "eval").mkdir(exist_ok=True)
        if k.task == "chain":  # seconds: which turn of a chain the warm start gets wrong (teacher-forced, greedy)
            turns = subprocess.run([k.python, "-m", "recipes.harness.learning.turn_accuracy", "--model_dir",
                                    str(k.work / "model_sft"), "--data_dir", str(k.work / "data"), "--threads",
                                    k.threads], cwd=REPO_ROOT, env=self.run_env, capture_output=True, text=True)
            (k.work / "eval" / "sft_turns.txt").write_text(turns.stdout)
            print(turns.stdout + turns.stderr, file=sys.stderr, end="")
        log("evaluating the SFT start (scripts/eval_gsm8k.sh, DEVICE=cpu)")
        sft = self.evaluate("sft", k.work / "model_sft", k.work / "data", "calculator")
        outputs = self.grpo()
        self.python("scripts/export_checkpoint.py", str(outputs / "checkpoints"), "--target_dir",
                    str(k.work / "model_final"), "--force", env=self.run_env)
        log("evaluating the final model, tools on and tools off")
        final = self.evaluate("final", k.work / "model_final", k.work / "data", "calculator")
        off = self.evaluate("final_tools_off", k.work / "model_final", k.work / "data_notools", "none")
        if self.python("scripts/rollout_report.py", "--rollout_dir", str(outputs / "rollouts"), "--validation_dir",
                       str(outputs / "validation"), "--out", str(outputs / "report"), env=self.run_env,
                       check=False):
            log("rollout report failed (see above); the scores stand")
        summaries = [str(k.work / "eval" / name / "validation" / "summary.json")
                     for name in ("sft", "final", "final_tools_off")]
        verdict = subprocess.run([k.python, "-m", "recipes.harness.learning.verdict", "--task", k.task, "--sft",
                                  summaries[0], "--final", summaries[1], "--tools_off", summaries[2]],
                                 cwd=REPO_ROOT, env=self.run_env, capture_output=True, text=True)
        print(verdict.stdout + verdict.stderr, file=sys.stderr, end="")
        print(self.result_line(sft, final, off), flush=True)
        return 0

    def result_line(self, sft: dict, final: dict, off: dict) -> str:
        wall = round(time.monotonic() - self.start)
        if self.knobs.task == "chain":
            log(f"SFT inits tried: {self.sft_attempts_used} (0: SFT_MODEL)")
            return (f"RESULT sft_acc={field(sft, 'strict_acc')} final_acc={field(final, 'strict_acc')} "
                    f"sft_acc_3={field(sft, 'strict_acc_ops3')} final_acc_3={field(final, 'strict_acc_ops3')} "
                    f"calls_per_op={field(final, 'calls_per_op')} tools_off_acc={field(off, 'strict_acc')} "
                    f"tool_call_rate={field(final, 'tool_call_rate')} wall_s={wall}")
        return (f"RESULT sft_acc={field(sft, 'strict_acc')} final_acc={field(final, 'strict_acc')} "
                f"tools_off_acc={field(off, 'strict_acc')} tool_call_rate={field(final, 'tool_call_rate')} "
                f"wall_s={wall} sft_attempts={self.sft_attempts_used}")


def field(summary: dict, key: str) -> float:
    return round(summary.get(key, math.nan), 4)


def main(argv: list[str] | None = None, environ: dict[str, str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        knobs = LearnKnobs.from_environ(dict(os.environ if environ is None else environ))
        return Pipeline(knobs, argv).run()
    except LearnError as err:
        print(f"[learn_cpu] error: {err}", file=sys.stderr)
        return 1
