"""The CPU learning check's pipeline, `python -m harness.learning`, as scripts/learn_cpu.sh runs it (that
script and scripts/learn_knobs.sh hold the knobs and their defaults; it exports them and makes this one call).

Steps, each a process of its own as a user would run it: the stages the learning checks share (stages.py: the task
through the recipe's data prep, tools on and tools off; the SFT warm start, started again from a new init when its
tool-only phase gets stuck); the warm start scored through `DEVICE=cpu scripts/eval_gsm8k.sh`; GRPO through
scripts/run_gsm8k_grpo.sh (PROFILE=cpu_learn); the final checkpoint exported and scored tools on and off; the
rollout report; the verdict (verdict.py); the RESULT line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from harness.learning.stages import LearnError, LearnKnobs, Stages, cpu_backend_env, field, run_check
from recipes.constants import REPO_ROOT
from recipes.trace_relay.spool import UPLOAD_COMMAND

CPU_ISAS = ("avx2", "avx512", "native")
EVAL_PROFILE = "cpu_learn"


@dataclass(frozen=True)
class CpuKnobs(LearnKnobs):
    """The shared knobs and the CPU check's own."""

    SCRIPT = "learn_cpu.sh"

    cpu_isa: str

    def check(self) -> None:
        super().check()
        if self.cpu_isa not in CPU_ISAS:
            raise LearnError(f"CPU_ISA must be avx2, avx512 or native, not '{self.cpu_isa}'")

    @property
    def experiment(self) -> str:
        return f"gsm8k_cpu_learn_{self.task}_seed{self.seed}"


def kernel_pins(cpu_isa: str) -> dict[str, str]:
    """The instruction set torch's and MKL's CPU kernels use in every process of the run: with it pinned, a seed gives
    the same warm start on any x86-64 CPU that has it; native: the CPU's best."""
    if cpu_isa == "native":
        return {}
    return {"ATEN_CPU_CAPABILITY": cpu_isa, "MKL_CBWR": cpu_isa.upper(), "MKL_ENABLE_INSTRUCTIONS": cpu_isa.upper()}


class Pipeline(Stages):
    NAME = "learn_cpu"

    def __init__(self, knobs: CpuKnobs, grpo_args: list[str]) -> None:
        super().__init__(knobs, grpo_args, kernel_pins(knobs.cpu_isa))

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
        self.log(f"GRPO: {k.grpo_steps} steps through scripts/run_gsm8k_grpo.sh (log {outputs}/logs/train.log)")
        env = {**self.run_env, "PROFILE": EVAL_PROFILE, "MODEL_PATH": str(k.work / "model_sft"),
               "DATA_DIR": str(k.work / "data"), "OUTPUT_DIR": str(outputs), "EXPERIMENT_NAME": k.experiment,
               "CPU_ROLLOUT_EVENTS": str(outputs / "logs" / "rollout_events.jsonl")}
        self.logged(["bash", "scripts/run_gsm8k_grpo.sh", f"trainer.total_training_steps={k.grpo_steps}",
                     f"trainer.save_freq={k.grpo_steps}", f"data.seed={k.seed}",
                     f"actor_rollout_ref.rollout.seed={k.seed}", *k.sizes(), *self.grpo_args],
                    env, outputs / "logs" / "train.log", "GRPO")
        if (outputs / "trace_spool").is_dir():  # TRACE=on: the relay's spool (docs/tracing.md)
            self.log(f"traces spooled in {outputs}/trace_spool; what W&B has not confirmed goes up with: "
                     f"{UPLOAD_COMMAND} --spool {outputs}/trace_spool")
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
            turns = subprocess.run([k.python, "-m", "harness.learning.turn_accuracy", "--model_dir",
                                    str(k.work / "model_sft"), "--data_dir", str(k.work / "data"), "--threads",
                                    k.threads], cwd=REPO_ROOT, env=self.run_env, capture_output=True, text=True)
            (k.work / "eval" / "sft_turns.txt").write_text(turns.stdout)
            print(turns.stdout + turns.stderr, file=sys.stderr, end="")
        self.log("evaluating the SFT start (scripts/eval_gsm8k.sh, DEVICE=cpu)")
        sft = self.evaluate("sft", k.work / "model_sft", k.work / "data", "calculator")
        outputs = self.grpo()
        self.python("-m", "recipes.export", str(outputs / "checkpoints"), "--target_dir",
                    str(k.work / "model_final"), "--force", env=self.run_env)
        self.log("evaluating the final model, tools on and tools off")
        final = self.evaluate("final", k.work / "model_final", k.work / "data", "calculator")
        off = self.evaluate("final_tools_off", k.work / "model_final", k.work / "data_notools", "none")
        self.rollout_report(outputs)
        self.verdict(*(k.work / "eval" / name / "validation" / "summary.json"
                       for name in ("sft", "final", "final_tools_off")))
        print(self.result_line(sft, final, off), flush=True)
        return 0

    def result_line(self, sft: dict, final: dict, off: dict) -> str:
        wall = self.wall
        if self.knobs.task == "chain":
            self.log(f"SFT inits tried: {self.sft_attempts_used} (0: SFT_MODEL)")
            return (f"RESULT sft_acc={field(sft, 'strict_acc')} final_acc={field(final, 'strict_acc')} "
                    f"sft_acc_3={field(sft, 'strict_acc_ops3')} final_acc_3={field(final, 'strict_acc_ops3')} "
                    f"calls_per_op={field(final, 'calls_per_op')} tools_off_acc={field(off, 'strict_acc')} "
                    f"tool_call_rate={field(final, 'tool_call_rate')} wall_s={wall}")
        return (f"RESULT sft_acc={field(sft, 'strict_acc')} final_acc={field(final, 'strict_acc')} "
                f"tools_off_acc={field(off, 'strict_acc')} tool_call_rate={field(final, 'tool_call_rate')} "
                f"wall_s={wall} sft_attempts={self.sft_attempts_used}")


def main(argv: list[str] | None = None, environ: dict[str, str] | None = None) -> int:
    return run_check(Pipeline, CpuKnobs, argv, environ)
