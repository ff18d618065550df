"""The GPU learning check's pipeline, `python -m harness.learning.gpu_pipeline`, as scripts/learn_gpu.sh runs
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

Split at the seam between what needs no GPU and what does: PREPARE_ONLY=1 makes the task, the data, the tokenizer,
the warm start (trained on the CPU), its SGLang check, its accuracy on the CPU and the composed config, and leaves
them in WORK_DIR/prepared (prepared.py: a few MB with a manifest), ending with

    PREPARED folder=<path> bytes=<n> files=<n> sft_acc_cpu=<a> sft_attempts=<n> wall_s=<s>

PREPARED=<that folder> then runs only the GRPO launch and the scoring from it (DEVICE=gpu: SGLang; DEVICE=cpu: the
CPU stand-ins), with the same RESULT line.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, fields
from pathlib import Path

from harness.launch_output import run_passing_output
from harness.learning import prepared, validation_scores
from harness.learning.stages import LearnError, LearnKnobs, Stages, cpu_backend_env, field, run_check
from recipes.constants import REPO_ROOT
from recipes.gsm8k.tool_sets import NO_TOOLS
from recipes.preflight.sglang_model import model_problems

DEVICES = ("gpu", "cpu")
PROFILES = {"gpu": "gpu_learn", "cpu": "cpu_learn"}  # cpu_learn: the same learning sizes, on the CPU stand-ins
TOOLS_ON = "calculator"  # the tool set of the data prep's default rows
PREPARED_DIR = "prepared"  # PREPARE_ONLY's folder, in WORK_DIR
# knobs of the launch, not of what a prepared folder holds: they may differ from its manifest's (said, not refused)
LAUNCH_KNOBS = ("GRPO_STEPS", "MAX_TURNS", "RESPONSE_LENGTH", "EVAL_TEMPERATURE")


@dataclass(frozen=True)
class GpuKnobs(LearnKnobs):
    """The shared knobs and the GPU check's own."""

    SCRIPT = "learn_gpu.sh"

    device: str
    dry_run: str
    prepare_only: str
    prepared: str

    def check(self) -> None:
        super().check()
        if self.device not in DEVICES:
            raise LearnError(f"DEVICE must be gpu or cpu, not '{self.device}'")
        for name in ("dry_run", "prepare_only"):
            if getattr(self, name) not in ("0", "1"):
                raise LearnError(f"{name.upper()} must be 0 or 1, not '{getattr(self, name)}'")
        if self.prepare_only == "1" and (self.prepared or self.dry_run == "1"):
            raise LearnError("PREPARE_ONLY=1 makes a prepared folder (and runs the launcher's DRY_RUN itself): set "
                             "neither PREPARED nor DRY_RUN=1 with it")
        if self.prepared and self.sft_model:
            raise LearnError("PREPARED holds its own warm start: set PREPARED or SFT_MODEL, not both")
        if self.prepared:
            folder, work = Path(self.prepared).resolve(), self.work.resolve()
            if work == folder or folder in work.parents:
                raise LearnError(f"WORK_DIR={self.work_dir} is PREPARED={self.prepared} or inside it: the run clears "
                                 "WORK_DIR; give it a WORK_DIR of its own")
        if not self.grpo_steps.isdigit() or int(self.grpo_steps) < 1:
            raise LearnError(f"GRPO_STEPS must be a whole number of steps, at least 1, not '{self.grpo_steps}'")

    @property
    def experiment(self) -> str:
        return f"gsm8k_gpu_learn_{self.task}_seed{self.seed}"

    def by_name(self) -> dict[str, str]:
        """The knobs a prepared folder records, by their shell names (not where things are, nor what to do)."""
        skip = {"python", "work_dir", "sft_model", "dry_run", "prepare_only", "prepared"}
        return {f.name.upper(): getattr(self, f.name) for f in fields(self) if f.name not in skip}


@dataclass(frozen=True)
class Inputs:
    """What the GRPO launch reads: the rows tools on (train and test), tools off (test) and the warm start."""

    data: Path
    data_notools: Path
    model: Path

    @classmethod
    def under(cls, folder: Path) -> Inputs:
        return cls(folder / "data", folder / "data_notools", folder / "model_sft")


class GpuPipeline(Stages):
    NAME = "learn_gpu"
    SHAPE = "sglang"

    def __init__(self, knobs: GpuKnobs, grpo_args: list[str]) -> None:
        super().__init__(knobs, grpo_args)
        # PREPARE_ONLY trains the warm start on the CPU, whatever DEVICE will run GRPO
        self.sft_device = "cuda" if knobs.device == "gpu" and knobs.prepare_only != "1" else "cpu"
        self.outputs = knobs.work / "outputs"
        self.inputs = Inputs.under(knobs.work)

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
                "DATA_DIR": str(self.inputs.data), "OUTPUT_DIR": str(self.outputs), "EXPERIMENT_NAME": k.experiment,
                "LOGGER": ",".join(loggers),  # file: verl's metrics per data_source, beside the dumps' scores
                "VERL_FILE_LOGGER_PATH": str(self.outputs / "metrics.jsonl"), "PYTHONUNBUFFERED": "1"}

    def launch_args(self) -> list[str]:
        """One launch: validation before step 1 and after the last step (test_freq = steps), on both files."""
        k, inputs = self.knobs, self.inputs
        return [f"data.val_files=[{inputs.data / 'test.parquet'},{inputs.data_notools / 'test.parquet'}]",
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
        mode = {"1": " (DRY_RUN: nothing trains)"}.get(k.dry_run, "")
        mode += f" (PREPARE_ONLY: into {k.work / PREPARED_DIR})" if k.prepare_only == "1" else ""
        mode += f" (from PREPARED={k.prepared})" if k.prepared else ""
        self.log(f"{k.task} task, seed {k.seed}, device {k.device}, work dir {k.work}{mode}")
        if k.prepared:
            return self.run_prepared(Path(k.prepared))
        self.stage("task and data (tools on and tools off)")
        self.prepare()
        if k.device == "cpu":
            self.use_cpu_standins()
        if k.dry_run == "1":
            self.stage("tokenizer and model")
            model = self.build_model(k.seed)
            self.stage("launcher DRY_RUN: the composed config and the plan")
            self.launch(model, dry_run=True)
            self.log(f"DRY_RUN: nothing trained; the composed config is {self.outputs / 'launch_config.yaml'}; the "
                     f"run would train the SFT on {self.sft_device}, then {k.grpo_steps} GRPO steps in this one launch")
            return 0
        self.stage(f"tokenizer, model and SFT warm start on {self.sft_device}" if not k.sft_model
                   else "warm start from SFT_MODEL")
        self.warm_start()
        if k.prepare_only == "1":
            return self.prepare_folder()
        return self.train_and_score(None)

    def use_cpu_standins(self) -> None:
        """GRPO and its validations on the CPU stand-ins' environment, no W&B cloud."""
        self.run_env = {**self.env, **cpu_backend_env(), "WANDB_MODE": os.environ.get("WANDB_MODE", "offline"),
                        "WANDB_ERROR_REPORTING": os.environ.get("WANDB_ERROR_REPORTING", "false")}

    def train_and_score(self, cpu_score: float | None) -> int:
        """The one GRPO launch from self.inputs, its two validations scored, the verdict, the RESULT line."""
        k = self.knobs
        self.stage(f"GRPO launch: {k.grpo_steps} steps, validation before and after, tools on and off")
        self.launch(self.inputs.model, dry_run=False)
        self.stage("scores from the two validations")
        before, after = self.scores()
        self.rollout_report(self.outputs)
        self.log(f"SFT inits tried: {self.sft_attempts_used} (0: SFT_MODEL)")
        if cpu_score is not None:
            here = field(before[TOOLS_ON], "strict_acc")
            self.log(f"the warm start scored {cpu_score:.3f} on the CPU when it was prepared (sampled at "
                     f"{k.eval_temperature}); the validation before step 1 here: {here}")
        scores = k.work / "scores"
        self.verdict(scores / "sft.json", scores / "final.json", scores / "final_tools_off.json")
        print(self.result_line(before, after), flush=True)
        return 0

    # ---- the seam: a prepared folder -----------------------------------------------------------------------------

    def score_on_cpu(self) -> dict:
        """The warm start's accuracy on the held-out problems, tools on, sampled as the first validation samples,
        in-process on the CPU (evaluate.py: the CPU stand-in of the rollout server, the recipe's agent loop)."""
        k = self.knobs
        overrides = [arg for size in k.sizes() for arg in ("--override", size)]
        out = subprocess.run([k.python, "-m", "harness.learning.evaluate", "--model_dir",
                              str(self.inputs.model), "--data_dir", str(self.inputs.data), "--temperature",
                              k.eval_temperature, "--seed", k.seed, *overrides],
                             cwd=REPO_ROOT, env={**self.env, **cpu_backend_env()}, capture_output=True, text=True)
        found = [line for line in out.stdout.splitlines() if line.startswith("[evaluate] ")]
        if out.returncode != 0 or not found:
            print("\n".join((out.stdout + out.stderr).splitlines()[-30:]), file=sys.stderr)
            raise LearnError(f"scoring the warm start on the CPU failed (exit {out.returncode}; its output above)")
        return json.loads(found[-1].removeprefix("[evaluate] "))

    def prepare_folder(self) -> int:
        """PREPARE_ONLY: the warm start scored on the CPU, the folder filled, the launcher's DRY_RUN from it (the
        composed config kept in it), the manifest written last; then the PREPARED line."""
        k = self.knobs
        folder = k.work / PREPARED_DIR
        self.stage("the warm start scored on the CPU (tools on)")
        score = self.score_on_cpu()
        self.log(f"warm start on the CPU: strict accuracy {score['acc']:.3f}, tool-call rate "
                 f"{score['tool_call_rate']:.3f} on {score['n']} held-out problems ({score['wall_s']} s)")
        self.stage(f"the prepared folder and the launcher's DRY_RUN from it ({PROFILES[k.device]} profile)")
        prepared.carry(k.work, folder)
        self.inputs = Inputs.under(folder)
        self.launch(self.inputs.model, dry_run=True)
        shutil.copy2(self.outputs / "launch_config.yaml", folder / prepared.LAUNCH_CONFIG)
        manifest = prepared.write_manifest(folder, k.by_name(), {
            "sft_attempts": self.sft_attempts_used, "sft_device": self.sft_device,
            "sft_acc_cpu": round(score["acc"], 4), "sft_tool_call_rate_cpu": round(score["tool_call_rate"], 4),
            "composed_for": {"device": k.device, "profile": PROFILES[k.device]}})
        size = prepared.size_bytes(folder)
        self.log(f"prepared: {folder} ({size / 2**20:.1f} MiB, {len(manifest['files'])} files and "
                 f"{prepared.MANIFEST}); on the GPU node: PREPARED={folder} bash scripts/learn_gpu.sh, with the same "
                 "knobs")
        print(f"PREPARED folder={folder} bytes={size} files={len(manifest['files'])} "
              f"sft_acc_cpu={field(score, 'acc')} sft_attempts={self.sft_attempts_used} wall_s={self.wall}",
              flush=True)
        return 0

    def run_prepared(self, folder: Path) -> int:
        """PREPARED: the folder checked against these knobs and this checkout, WORK_DIR cleared around it, then the
        GRPO launch from it and the scoring."""
        k = self.knobs
        self.stage(f"prepared folder {folder}: manifest, recipe version, knobs, checksums")
        try:
            manifest = prepared.read(folder, k.by_name())
        except prepared.PreparedError as err:
            raise LearnError(str(err)) from None
        for name in LAUNCH_KNOBS:
            was = manifest.get("knobs", {}).get(name)
            if was is not None and was != k.by_name()[name]:
                self.log(f"{name}={k.by_name()[name]} here, {was} when prepared (a knob of the launch: this run's "
                         "applies; the folder's launch_config.yaml shows the other)")
        made_for = manifest.get("composed_for", {}).get("device")
        if made_for and made_for != k.device:
            self.log(f"the folder's launch_config.yaml was composed for DEVICE={made_for}; this run composes its "
                     f"own for DEVICE={k.device}")
        self.clear_work(keep=folder)
        self.inputs = Inputs.under(folder)
        self.model_built(self.inputs.model)
        self.sft_attempts_used = int(manifest.get("sft_attempts", 0))
        if k.device == "cpu":
            self.use_cpu_standins()
        return self.train_and_score(manifest.get("sft_acc_cpu"))

    def clear_work(self, keep: Path) -> None:
        """WORK_DIR emptied for this run, except the entry that holds `keep` (a prepared folder inside it)."""
        work = self.knobs.work
        keep = keep.resolve()
        work.mkdir(parents=True, exist_ok=True)
        for entry in work.iterdir():
            if entry.resolve() == keep or entry.resolve() in keep.parents:
                continue
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()


def main(argv: list[str] | None = None, environ: dict[str, str] | None = None) -> int:
    return run_check(GpuPipeline, GpuKnobs, argv, environ)


if __name__ == "__main__":
    sys.exit(main())
