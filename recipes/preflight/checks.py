"""Each check reads the composed config and returns problems as one line each that says what to change."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import shutil
import subprocess
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from recipes.config_view import ConfigView
from recipes.constants import AGENT_NAME, AGENT_NAME_NO_TOOLS, CPU_ROLLOUT_NAME, REPO_ROOT
from recipes.credentials import has_wandb_credentials, wandb_host
from recipes.models import ModelSource, looks_like_a_local_path
from recipes.preflight.facts import RunFacts
from recipes.preflight.findings import Report
from recipes.preflight.hub_model import check_hub_model
from recipes.preflight.jit_toolchain import check_jit_toolchain
from recipes.preflight.memory import check_memory
from recipes.preflight.prompt_lengths import check_prompt_lengths
from recipes.preflight.rollout_checks import check_lora_with_sglang, check_rollout_concurrency, check_tool_timeout
from recipes.preflight.row_origin import check_row_origin
from recipes.preflight.schedule import check_schedule
from recipes.preflight.sglang_model import check_sglang_model
from recipes.preflight.storage import check_checkpoint_space, check_outputs_private, check_shared_outputs
from recipes.preflight.versions import check_gpu_env

REQUIRED_COLUMNS = ("data_source", "prompt", "reward_model", "extra_info", "agent_name")
# What a dry run leaves unchecked (the GPU node's own install), in the one line it says so
NOT_CHECKED_BY_A_DRY_RUN = ("not checked by a dry run (they need the GPU node): its GPU count, NVIDIA driver, the GPU "
                            "env's locked versions and kernels, CUDA and host compilers and kernel caches; "
                            "CHECK_ONLY=1 bash scripts/run_gsm8k_grpo.sh on the GPU node checks them")


def _tool_names(view: ConfigView, report: Report) -> list[str] | None:
    """The tools the workers will load (verl's load_all_tools: the tool config's classes and the function tool file's
    functions), by name; None, and the error, when they do not load. A tool set whose YAML names a function tool
    file that the config does not hand to verl would offer the model tools no worker has."""
    from verl.tools.tool_registry import load_all_tools

    path, functions = view.tool_config_path, view.function_tool_path
    named = _named_function_tools(path)
    if named and (not functions or Path(functions).resolve() != (REPO_ROOT / named).resolve()):
        report.error(f"{path} names the function tools of {named}, but actor_rollout_ref.rollout.multi_turn."
                     f"function_tool_path is {functions}: no worker would load them; set it to {REPO_ROOT / named} "
                     "(the launcher does for TOOL_SET)")
    try:
        return [tool.name for tool in load_all_tools(tool_config_path=path, function_tool_path=functions)]
    except Exception as err:
        report.error(f"tools of {path or functions} do not load through verl ({type(err).__name__}: "
                     f"{str(err).splitlines()[0] if str(err) else ''})")
        return None


def _named_function_tools(path: str | None) -> str | None:
    """The function tool file a tool-set YAML names (`function_tool_path`, from the repo's root)."""
    import yaml

    try:
        named = (yaml.safe_load(Path(path).read_text()) or {}).get("function_tool_path") if path else None
    except (OSError, yaml.YAMLError, AttributeError):
        return None  # verl's loader says what is wrong with the file
    return str(named) if named else None


def data_files(config: DictConfig) -> list[tuple[str, Path]]:
    """(key, path) of every training and validation file the config names."""
    out = []
    for key in ("train_files", "val_files"):
        files = OmegaConf.select(config, f"data.{key}")
        out += [(key, Path(os.path.expanduser(f))) for f in ([files] if isinstance(files, str) else list(files or []))]
    return out


def check_data(config: DictConfig, tool_names: list[str] | None, report: Report) -> int | None:
    """Returns the number of training rows (for sizing the run), None if unknown. Every file's rows must offer the
    tools the tool config offers, and ask for the loop of their tool set; a validation file may instead hold
    tools-off rows (tool set none, agent_name tool_agent_no_tools): the same model scored with tools off."""
    import pyarrow.parquet as pq

    train_rows = None
    for key, path in data_files(config):
        if not path.is_file():
            report.error(f"data.{key}: {path} not found; run `python data_prep/gsm8k.py --local_save_dir "
                         f"{path.parent}` or set DATA_DIR")
            continue
        schema = pq.read_schema(path)
        missing = [c for c in REQUIRED_COLUMNS if c not in schema.names]
        if missing:
            report.error(f"{path}: missing columns {missing}; re-run python data_prep/gsm8k.py")
            continue
        if key == "train_files":
            train_rows = (train_rows or 0) + pq.read_metadata(path).num_rows
        row = pq.read_table(path, columns=["data_source", "prompt", "agent_name", "extra_info"]).slice(0, 1)
        row = row.to_pylist()[0]
        check_row_origin(config, path, row, report)
        data_tools = sorted((row["extra_info"] or {}).get("tools_kwargs") or {})
        data_set = (row["extra_info"] or {}).get("tool_set")
        loops = (AGENT_NAME,) if data_tools else (AGENT_NAME_NO_TOOLS, AGENT_NAME)  # the second: files made before
        if row["agent_name"] not in loops:
            report.error(f"{path}: rows ask for agent_name {row['agent_name']!r}, but rows of tool set {data_set!r} "
                         f"run the recipe's {loops[0]!r}; re-run python data_prep/gsm8k.py")
        tools_off_val = key == "val_files" and row["agent_name"] == AGENT_NAME_NO_TOOLS
        if tool_names is not None and data_tools != sorted(tool_names) and not tools_off_val:
            report.error(f"{path}: rows were prepared for tool set {data_set!r} (tools {data_tools}) but the tool "
                         f"config offers {sorted(tool_names)}; re-run `python data_prep/gsm8k.py --tool_set "
                         f"<set>` or set TOOL_SET={data_set}")
    return train_rows


def asked_agent_loops(config: DictConfig) -> set[str]:
    """The agent_name of the first row of each data file there is (data prep gives a file one loop)."""
    import pyarrow.parquet as pq

    names = set()
    for _, path in data_files(config):
        if path.is_file() and "agent_name" in pq.read_schema(path).names:
            names |= set(pq.read_table(path, columns=["agent_name"]).slice(0, 1).column(0).to_pylist())
    return names


def check_model(model: ModelSource, report: Report) -> None:
    """A model folder that is not there (a typo, an export not made yet) would fail only after Ray has started;
    a hub id is fetched then and cannot be checked here."""
    if not looks_like_a_local_path(model.name):
        return
    where = "" if model.folder.is_absolute() else f" (relative to {Path.cwd()}, where the launcher runs)"
    if not model.folder.is_dir():
        report.error(f"actor_rollout_ref.model.path: {model.name} does not exist{where}; set MODEL_PATH to a model "
                     "folder (gsm8k-export-checkpoint makes one from a checkpoint) or a hub id "
                     "(Qwen/Qwen2.5-3B-Instruct)")
    elif not (model.folder / "config.json").is_file():
        report.error(f"actor_rollout_ref.model.path: {model.name} has no config.json{where}: not a Hugging Face model "
                     "folder (gsm8k-export-checkpoint turns a checkpoint into one)")
    else:
        check_transformers_version(model.folder / "config.json", report)


def check_transformers_version(config_file: Path, report: Report) -> None:
    """transformers 5.x treats a local model folder whose config.json has no `transformers_version` as a possible
    Mistral tokenizer and warns in every process that loads it, the SGLang server and each agent-loop worker,
    that it "will lead to incorrect tokenization" (transformers/tokenization_utils_tokenizers.py, the
    fix_mistral_regex check): a false alarm a user reads as a broken model. save_pretrained writes the field."""
    try:
        config = json.loads(config_file.read_text())
    except (OSError, ValueError) as err:
        report.error(f"{config_file} does not read as JSON ({type(err).__name__}: {err})")
        return
    if isinstance(config, dict) and not config.get("transformers_version"):
        report.warn(f"{config_file} has no \"transformers_version\": transformers will warn in every worker that "
                    "the tokenizer has an incorrect regex pattern (a false alarm for a non-Mistral model); add "
                    f"\"transformers_version\": \"{importlib.metadata.version('transformers')}\" to it")


def check_reward(config: DictConfig, report: Report) -> None:
    path = OmegaConf.select(config, "reward.custom_reward_function.path")
    name = OmegaConf.select(config, "reward.custom_reward_function.name")
    if not path:
        report.warn("reward.custom_reward_function.path is unset: verl's default GSM8K scorer will also score "
                    "tool responses as if the model wrote them")
        return
    if not Path(path).is_file():
        moved = Path(path).parts[-2:] == ("recipes", "reward.py")  # where it was before recipes/gsm8k/
        moved = " (the recipe's reward is recipes/gsm8k/reward.py now)" if moved else ""
        report.error(f"reward.custom_reward_function.path: {path} not found{moved}")
        return
    spec = importlib.util.spec_from_file_location("_preflight_reward", path)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as err:
        report.error(f"reward function file {path} does not import ({type(err).__name__}: {err})")
        return
    if not callable(getattr(module, name, None)):
        report.error(f"reward.custom_reward_function.name: {path} has no function {name!r}")


def check_resume(config: DictConfig, report: Report) -> None:
    """verl resumes whatever checkpoint trainer.default_local_dir holds: one of another model or reward would be
    trained on as if nothing changed (the run's RUN_RECORD says what it is of)."""
    from recipes.export.provenance import resume_mismatch

    found = resume_mismatch(config)
    if found:
        differ, folder = found
        report.error(f"{folder} holds checkpoints of another run ({differ}): resuming would load its weights into this "
                     "one; set EXPERIMENT_NAME (or OUTPUT_DIR) for a new run, or trainer.resume_mode=disable to start "
                     "over in that folder")


def check_agent_loops(config: DictConfig, report: Report) -> None:
    path = OmegaConf.select(config, "actor_rollout_ref.rollout.agent.agent_loop_config_path")
    if not path or not Path(path).is_file():
        report.error(f"actor_rollout_ref.rollout.agent.agent_loop_config_path: {path} not found")
        return
    entries = OmegaConf.load(path)
    names = [entry.name for entry in entries]
    for name in sorted({AGENT_NAME} | asked_agent_loops(config)):
        if name not in names:
            report.error(f"{path} does not declare {name!r}, the agent_name the data's rows ask for")
    for entry in entries:
        module_name, _, cls = entry._target_.rpartition(".")
        try:
            module = importlib.import_module(module_name)
            getattr(module, cls)
        except Exception as err:
            report.error(f"{path}: {entry.name} -> {entry._target_} does not import ({type(err).__name__}: {err})")
    _check_tool_parser(config, report)


def _check_tool_parser(config: DictConfig, report: Report) -> None:
    """The tool-call format must be registered once the agent loops are imported, as it will be in the workers."""
    from verl.experimental.agent_loop.tool_parser import ToolParser

    fmt = OmegaConf.select(config, "actor_rollout_ref.rollout.multi_turn.format")
    if fmt not in ToolParser._registry:
        report.error(f"actor_rollout_ref.rollout.multi_turn.format={fmt} is not a registered tool parser "
                     f"(known: {sorted(ToolParser._registry)}); the recipe's agent loop registers hermes_with_feedback")


def check_modules_are_ours(report: Report) -> None:
    """`tools` is a common name: the workers must import this repo's, not another installed package's."""
    for name in ("tools", "recipes"):
        spec = importlib.util.find_spec(name)
        origin = Path(spec.origin).resolve() if spec and spec.origin else None
        if origin is None or REPO_ROOT not in origin.parents:
            report.error(f"`import {name}` resolves to {origin}, not {REPO_ROOT / name}; put the repo root first on "
                         "PYTHONPATH (the launcher does) or rename the other package")


def check_tracing(config: DictConfig, report: Report) -> None:
    trace = OmegaConf.select(config, "actor_rollout_ref.rollout.trace")
    if not trace.backend:
        return
    if OmegaConf.select(config, "trainer.use_v1"):
        report.error("trace.backend is set but trainer.use_v1=True: verl 0.9.1's V1 trainer never traces agent "
                     "loops; set trainer.use_v1=False (the recipe's default) or TRACE=off")
    if trace.max_samples_per_step_per_worker is not None and trace.max_samples_per_step_per_worker <= 0:
        report.error("trace.max_samples_per_step_per_worker <= 0 records nothing; use a positive number or TRACE=off")
    if not OmegaConf.select(config, "trainer.val_only"):
        from recipes.tracing.volume import TraceShape, split_refusal

        refusal = split_refusal(TraceShape.of(config))
        if refusal:
            report.error(refusal)
    if not trace.token2text:
        report.warn("trace.token2text=False: traces will show token ids only, no readable text")


def on_cpu_platform() -> bool:
    """scripts/smoke_cpu.sh: verl runs on the CPU backend's platform (scripts/harness/cpu_backend/), no GPU or GPU
    env to check."""
    return os.environ.get("VERL_PLATFORM") == "cpu"


def check_cpu_rollout(config: DictConfig, report: Report) -> None:
    """On the CPU platform only the CPU rollout stand-in can generate (SGLang has no CPU backend): a GPU profile
    there would fail minutes later, inside Ray."""
    if not on_cpu_platform():
        return
    name = config.actor_rollout_ref.rollout.name
    if name != CPU_ROLLOUT_NAME:
        report.error(f"VERL_PLATFORM=cpu (DEVICE=cpu, smoke_cpu.sh) runs the rollout {CPU_ROLLOUT_NAME} only, but "
                     f"actor_rollout_ref.rollout.name={name}: use a CPU profile (PROFILE=cpu_smoke)")


def check_gpus(view: ConfigView, report: Report, visible: int | None = None, breaks=lambda view: []) -> None:
    """The GPUs this node shows against the config's; the count suggested instead comes with the batch it needs when
    it does not divide the step as it is (every rule of the preflight: `breaks`)."""
    if on_cpu_platform():
        return  # CPU ranks: Ray's logical GPUs, not devices to count
    wanted = view.gpus_per_node
    if visible is None:
        visible = count_visible_gpus()
    if visible is None:
        report.error("cannot count GPUs (no nvidia-smi and no CUDA torch); run on a GPU node, "
                     "or DRY_RUN=1 to check only")
    elif visible == 0:
        report.error(f"no GPU visible but trainer.n_gpus_per_node={wanted}; fix CUDA_VISIBLE_DEVICES, or run on a GPU "
                     "node")
    elif visible != wanted:
        report.error(f"{visible} GPU(s) visible but trainer.n_gpus_per_node={wanted}; set "
                     f"{_gpu_count_fix(view, visible, breaks)}, or fix CUDA_VISIBLE_DEVICES")
    else:
        report.note(f"GPUs: {visible} visible, as trainer.n_gpus_per_node={wanted} asks")


def _gpu_count_fix(view: ConfigView, visible: int, breaks) -> str:
    from dataclasses import replace

    from recipes.preflight.division import fitting_batch

    here = replace(view, gpus_per_node=visible)
    if not breaks(here):
        return f"N_GPUS_PER_NODE={visible}"
    fitting = fitting_batch(here, breaks) if view.mini_batch == view.train_batch_size else None
    if fitting is None:
        return f"N_GPUS_PER_NODE={visible} and a profile for {visible} GPU(s) (config/profile/)"
    return f"N_GPUS_PER_NODE={visible} {' '.join(here.overrides_to(fitting))}"


def count_visible_gpus() -> int | None:
    if os.environ.get("PREFLIGHT_VISIBLE_GPUS"):  # for tests and odd clusters
        return int(os.environ["PREFLIGHT_VISIBLE_GPUS"])
    if shutil.which("nvidia-smi"):
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30).stdout
        count = sum(1 for line in out.splitlines() if line.startswith("GPU "))
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        return len([d for d in visible.split(",") if d.strip()]) if visible is not None else count
    return None


def check_wandb(view: ConfigView, report: Report, traces_offline: bool = False) -> None:
    """traces_offline: TRACE_RELAY=offline, the traces kept on disk and uploaded later (no key needed for them)."""
    traces = view.traces and not traces_offline
    uses = [x for x in ("wandb" in view.logger and "wandb logger", traces and "weave trace") if x]
    if uses and not has_wandb_credentials():
        report.error(f"{' and '.join(uses)} need W&B credentials: export WANDB_API_KEY=... (or `wandb login` for "
                     f"{wandb_host()}), or turn them off with LOGGER=console TRACE=off")


def run_all(facts: RunFacts, report: Report | None = None, launch: bool = False, submit: bool = False,
            dry_run: bool = False, traces_offline: bool = False) -> Report:
    """launch: about to start on this node (GPUs, credentials, disk); submit: about to go to a Ray cluster; dry_run:
    what a launch checks but the GPU node's own install (one line says so); neither: the
    config and what it names (gsm8k-preflight); traces_offline: TRACE_RELAY=offline (no W&B key needed for
    traces)."""
    report = report or Report()
    config, view, model = facts.config, facts.view, facts.model
    has_tools = view.tool_config_path or view.function_tool_path
    tool_names = _tool_names(view, report) if has_tools else []  # no tools: data must offer none
    check_data(config, tool_names, report)
    check_schedule(view, facts.schedule, report, facts.breaks)
    check_model(model, report)
    check_hub_model(model, report, planning=not (launch or submit))
    check_resume(config, report)
    check_reward(config, report)
    check_agent_loops(config, report)
    check_modules_are_ours(report)
    check_tracing(config, report)
    check_prompt_lengths(config, report, model)
    check_sglang_model(config, report, model)
    check_lora_with_sglang(view, report)
    check_rollout_concurrency(view, report)
    check_memory(view, facts.memory, report, facts.breaks)
    check_tool_timeout(config, report)
    check_shared_outputs(config, report)
    check_outputs_private(config, report)
    check_cpu_rollout(config, report)
    # this node as the GPU node, on a launch (a submission's nodes are the cluster's; a dry run, which may plan for
    # another node, says what it leaves to CHECK_ONLY=1 there)
    if launch and not on_cpu_platform():
        check_gpus(view, report, breaks=facts.breaks)
        check_gpu_env(config, report)  # driver, locked versions, attention implementation
        # the compilers SGLang and FlashInfer use at first use, their caches and what the model needs there
        check_jit_toolchain(report, model=model.name)
    elif dry_run and not on_cpu_platform():
        report.note(NOT_CHECKED_BY_A_DRY_RUN)
    if launch or submit or dry_run:
        check_wandb(view, report, traces_offline)
        check_checkpoint_space(view, facts.schedule.steps, model, report)
    return report
