"""The GPU learning check's pipeline, `python -m recipes.harness.learning.gpu_pipeline`, as scripts/learn_gpu.sh runs
it (that script and scripts/learn_knobs.sh hold the knobs and their defaults).

The CPU check's task and warm start (stages.py) with a model SGLang serves (small_model.py SGLANG_SHAPE: head_dim 64),
the SFT on the GPU, then ONE launch of the recipe's launcher (PROFILE=gpu_learn: SGLang async multi-turn rollouts, the
recipe's agent loop, calculator and in-loop reward) that validates before the first GRPO step and after the last, on
two files at once: the held-out problems with the calculator offered and the same problems without it (their own
data_source and agent loop, so verl reports them apart). Its scores come from those two validations
(validation_scores.py), the verdict is the CPU check's (verdict.py), and the last line is

    RESULT sft_acc=<a> final_acc=<b> tools_off_acc=<c> tool_call_rate=<d> tool_calls_per_trajectory=<e>
           turns_mean=<f> steps=<n> wall_s=<s>

(one line; the chain task adds sft_acc_3, final_acc_3 and calls_per_op). DEVICE=cpu runs the same stages on the
CPU stand-ins (PROFILE=cpu_learn, the hf_cpu rollout, the SFT on CPU); DRY_RUN=1 stops before training: the task, the
data, the tokenizer, the model's config and its SGLang check, then the launcher's DRY_RUN (the composed config and
the plan). Every file the check writes is under WORK_DIR. `[learn_gpu] stage: ...` lines mark each stage.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from recipes.constants import REPO_ROOT
from recipes.harness.launch_output import run_passing_output
from recipes.harness.learning import validation_scores
from recipes.harness.learning.stages import LearnError, LearnKnobs, Stages, cpu_backend_env, field, run_check
from recipes.preflight.sglang_model import model_problems
from recipes.tool_sets import NO_TOOLS

DEVICES = ("gpu", "cpu")
PROFILES = {"gpu": "gpu_learn", "cpu": "cpu_learn"}  # cpu_learn: the same learning sizes, on the CPU stand-ins
TOOLS_ON = "calculator"  # the tool set of the data prep's default rows


@dataclass(frozen=True)
class GpuKnobs(LearnKnobs):
    """The shared knobs and the GPU check's own."""

    SCRIPT = "learn_gpu.sh"

    device: str
    dry_run: str

    def check(self) -> None:
        super().check()
        if self.device not in DEVICES:
            raise LearnError(f"DEVICE must be gpu or cpu, not '{self.device}'")
        if self.dry_run not in ("0", "1"):
            raise LearnError(f"DRY_RUN must be 0 or 1, not '{self.dry_run}'")
        if not self.grpo_steps.isdigit() or int(self.grpo_steps) < 1:
            raise LearnError(f"GRPO_STEPS must be a whole number of steps, at least 1, not '{self.grpo_steps}'")

    @property
    def experiment(self) -> str:
        return f"gsm8k_gpu_learn_{self.task}_seed{self.seed}"


class GpuPipeline(Stages):
    NAME = "learn_gpu"
    SHAPE = "sglang"

    def __init__(self, knobs: GpuKnobs, grpo_args: list[str]) -> None:
        super().__init__(knobs, grpo_args)
        self.sft_device = "cuda" if knobs.device == "gpu" else "cpu"
        self.outputs = knobs.work / "outputs"

    def stage(self, what: str) -> None:
        self.log(f"stage: {what} ({self.wall} s)")

    def model_built(self, folder: Path) -> None:
        """The model must be one SGLang serves, whichever device this run uses: refused here, before any training."""
        config = json.loads((folder / "config.json").read_text())
        errors, notes = model_problems(folder, offers_tools=True, context_needed=0)
        for note in notes:
            self.log(note)
        if errors:
            raise LearnError(errors[0])
        self.log(f"model {folder.name}: {config.get('hidden_size')} wide, {config.get('num_hidden_layers')} layers, "
                 f"vocab {config.get('vocab_size')}, max positions {config.get('max_position_embeddings')}")

    # ---- the launch ----------------------------------------------------------------------------------------------

    def launch_env(self, model: Path) -> dict[str, str]:
        k = self.knobs
        logger = os.environ.get("LOGGER", "")
        loggers = ["console", "file"] + (["wandb"] if "wandb" in logger.split(",") else [])
        return {**self.run_env, "PROFILE": PROFILES[k.device], "MODEL_PATH": str(model),
                "DATA_DIR": str(k.work / "data"), "OUTPUT_DIR": str(self.outputs), "EXPERIMENT_NAME": k.experiment,
                "LOGGER": ",".join(loggers),  # file: verl's metrics per data_source, beside the dumps' scores
                "VERL_FILE_LOGGER_PATH": str(self.outputs / "metrics.jsonl"), "PYTHONUNBUFFERED": "1"}

    def launch_args(self) -> list[str]:
        """One launch: validation before step 1 and after the last step (test_freq = steps), on both files."""
        k = self.knobs
        work = k.work
        return [f"data.val_files=[{work / 'data' / 'test.parquet'},{work / 'data_notools' / 'test.parquet'}]",
                f"trainer.total_training_steps={k.grpo_steps}", f"trainer.test_freq={k.grpo_steps}",
                "trainer.save_freq=-1",  # scored inside the launch: no checkpoint to keep
                # verl's filter renders every row with the calculator's schema: the tools-off file would vanish
                # (recipes/preflight/prompt_lengths.py); the task's prompts are far below the limit by construction
                "data.filter_overlong_prompts=false",
                f"actor_rollout_ref.rollout.val_kwargs.temperature={k.eval_temperature}",
                f"data.seed={k.seed}", f"actor_rollout_ref.rollout.seed={k.seed}", *k.sizes(), *self.grpo_args]

    def launch(self, model: Path, dry_run: bool) -> None:
        """The recipe's launcher; its output to this check's output and to outputs/logs, until the launcher has
        exited (not until its output's end, which a process it started can hold open: launch_output.py)."""
        log_file = self.outputs / "logs" / ("dry_run.log" if dry_run else "train.log")
        log_file.parent.mkdir(parents=True, exist_ok=True)
        env = self.launch_env(model)
        if dry_run:
            env.update(DRY_RUN="1", DRY_RUN_CONFIG=str(self.outputs / "launch_config.yaml"))
        sys.stdout.flush()
        sys.stderr.flush()
        with log_file.open("w") as log:
            status = run_passing_output(["bash", "scripts/run_gsm8k_grpo.sh", *self.launch_args()], cwd=REPO_ROOT,
                                        env=env, sinks=[sys.stdout, log], note=self.log)
        if status != 0:
            raise LearnError(f"the GRPO launch failed (exit {status}; log {log_file})")

    # ---- the scores -----------------------------------------------------------------------------------------------

    def scores(self) -> tuple[dict, dict]:
        """The summaries of the validation before training and after the last step, {tool set: summary} each; both
        files must be there in full in both (a file verl dropped would leave a metric silently missing)."""
        k = self.knobs
        steps = int(k.grpo_steps)
        found = {}
        for step in (0, steps):
            dump = self.outputs / "validation" / f"{step}.jsonl"
            if not dump.is_file():
                raise LearnError(f"no validation dump {dump}: the launch did not validate at step {step}")
            found[step] = validation_scores.summaries(dump)
            rows = {tool_set: s["answers"] for tool_set, s in found[step].items()}
            if rows != {TOOLS_ON: int(k.test_rows), NO_TOOLS: int(k.test_rows)}:
                raise LearnError(f"the validation at step {step} scored {rows} rows by tool set, not {k.test_rows} "
                                 f"with tools ({TOOLS_ON}) and {k.test_rows} without ({NO_TOOLS}): verl dropped rows")
        self.compare_with_verl(found[steps], steps)
        scores_dir = k.work / "scores"
        scores_dir.mkdir(exist_ok=True)
        for name, summary in (("sft", found[0][TOOLS_ON]), ("sft_tools_off", found[0][NO_TOOLS]),
                              ("final", found[steps][TOOLS_ON]), ("final_tools_off", found[steps][NO_TOOLS])):
            (scores_dir / f"{name}.json").write_text(json.dumps(summary, indent=1))
            print(json.dumps({"eval": name, **summary}), flush=True)
        return found[0], found[steps]

    def compare_with_verl(self, parts: dict, step: int) -> None:
        metrics_file = self.outputs / "metrics.jsonl"
        if not metrics_file.is_file():
            self.log(f"no {metrics_file} (verl's file logger): the dumps' scores stand unchecked")
            return
        differ = validation_scores.disagreements(parts, validation_scores.verl_metrics(metrics_file, step))
        for line in differ:
            self.log(f"WARNING: the validation dump and verl's metrics differ: {line}")
        if not differ:
            self.log(f"step {step}: the validation dump's scores are verl's metrics per data_source (acc, tool-call "
                     "rate, calls, turns; tools on and off)")

    def result_line(self, before: dict, after: dict) -> str:
        on, off = after[TOOLS_ON], after[NO_TOOLS]
        line = (f"RESULT sft_acc={field(before[TOOLS_ON], 'strict_acc')} final_acc={field(on, 'strict_acc')} "
                f"tools_off_acc={field(off, 'strict_acc')} tool_call_rate={field(on, 'tool_call_rate')} "
                f"tool_calls_per_trajectory={field(on, 'tool_calls_per_answer')} turns_mean={field(on, 'turns_mean')} "
                f"steps={self.knobs.grpo_steps} wall_s={self.wall}")
        if self.knobs.task == "chain":
            line += (f" sft_acc_3={field(before[TOOLS_ON], 'strict_acc_ops3')} "
                     f"final_acc_3={field(on, 'strict_acc_ops3')} calls_per_op={field(on, 'calls_per_op')}")
        return line

    # ---- the check -----------------------------------------------------------------------------------------------

    def run(self) -> int:
        k = self.knobs
        self.log(f"{k.task} task, seed {k.seed}, device {k.device}, work dir {k.work}"
                 + (" (DRY_RUN: nothing trains)" if k.dry_run == "1" else ""))
        self.stage("task and data (tools on and tools off)")
        self.prepare()
        if k.device == "cpu":  # the CPU stand-ins' environment, no W&B cloud
            self.run_env = {**self.env, **cpu_backend_env(), "WANDB_MODE": os.environ.get("WANDB_MODE", "offline"),
                            "WANDB_ERROR_REPORTING": os.environ.get("WANDB_ERROR_REPORTING", "false")}
        if k.dry_run == "1":
            self.stage("tokenizer and model")
            model = self.build_model(k.seed)
            self.stage("launcher DRY_RUN: the composed config and the plan")
            self.launch(model, dry_run=True)
            self.log(f"DRY_RUN: nothing trained; the composed config is {self.outputs / 'launch_config.yaml'}; the "
                     f"run would train the SFT on {self.sft_device}, then {k.grpo_steps} GRPO steps in this one launch")
            return 0
        self.stage("tokenizer, model and SFT warm start" if not k.sft_model else "warm start from SFT_MODEL")
        self.warm_start()
        self.stage(f"GRPO launch: {k.grpo_steps} steps, validation before and after, tools on and off")
        self.launch(k.work / "model_sft", dry_run=False)
        self.stage("scores from the two validations")
        before, after = self.scores()
        self.rollout_report(self.outputs)
        self.log(f"SFT inits tried: {self.sft_attempts_used} (0: SFT_MODEL)")
        scores = k.work / "scores"
        self.verdict(scores / "sft.json", scores / "final.json", scores / "final_tools_off.json")
        print(self.result_line(before, after), flush=True)
        return 0


def main(argv: list[str] | None = None, environ: dict[str, str] | None = None) -> int:
    return run_check(GpuPipeline, GpuKnobs, argv, environ)


if __name__ == "__main__":
    sys.exit(main())
