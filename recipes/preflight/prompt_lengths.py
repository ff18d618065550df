"""verl's overlong-prompt filter, counted before the launch, for the validation files.

With data.filter_overlong_prompts on, verl's RLHFDataset renders EVERY row with the run's tool schemas, whatever the
row's agent loop offers (verl/utils/dataset/rl_dataset.py: the schemas loaded as the agent-loop workers load them,
passed to apply_chat_template in maybe_filter_out_long_prompts), and drops each row longer than
data.max_prompt_length with nothing said but the dataset's new length. A validation file of tools-off rows (tool set
"none") rendered with the calculator's schema can be far longer than the agent loop ever makes it (the learning
checks' small tokenizer: 330 tokens against 41), and vanish: the launch then reports no metric for it. Counted here
the way verl counts, with the model's tokenizer; a file that would lose every row stops the launch, one that would
lose some is a warning. Training files are left to verl (dropped rows there only shrink the set).
"""

from __future__ import annotations

import os
from pathlib import Path

from omegaconf import DictConfig

from recipes.models import ModelSource, resolve_model
from recipes.preflight.findings import Report
from recipes.preflight.model_tokenizer import load_tokenizer


def prompt_lengths(config: DictConfig, path: Path, tokenizer) -> list[int]:
    """Each row's prompt length in tokens as verl's overlong filter computes it (text-only rows)."""
    import pyarrow.parquet as pq
    from verl.tools.tool_registry import load_all_tools
    from verl.utils.tokenizer import normalize_token_ids

    data = config.data
    tool_config = data.get("tool_config_path")  # verl's data config: the rollout's tool config, interpolated
    function_tools = data.get("function_tool_path")
    kwargs = dict(**(data.get("apply_chat_template_kwargs") or {}))  # as verl copies it
    for key in ("tokenize", "return_dict", "return_tensors"):  # verl pops them too
        kwargs.pop(key, None)
    if tool_config or function_tools:
        tools = load_all_tools(tool_config_path=tool_config, function_tool_path=function_tools)
        kwargs["tools"] = [tool.tool_schema.model_dump(exclude_unset=True, exclude_none=True) for tool in tools]
    prompts = pq.read_table(path, columns=[data.get("prompt_key", "prompt")]).column(0).to_pylist()
    return [len(normalize_token_ids(tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=True,
                                                                   **kwargs))) for prompt in prompts]


def check_prompt_lengths(config: DictConfig, report: Report, model: ModelSource | None = None) -> None:
    """`model`: where the preflight found the launch's model (else looked up from the config)."""
    data = config.data
    model = model or resolve_model(str(config.actor_rollout_ref.model.path))
    folder = model.folder
    if not data.get("filter_overlong_prompts", True) or not model.local or not (folder / "config.json").is_file():
        return  # nothing filtered, or the tokenizer is a hub id's (not fetched here)
    files = data.val_files
    files = [files] if isinstance(files, str) else list(files or [])
    if not all(Path(os.path.expanduser(f)).is_file() for f in files):
        return  # check_data names the missing ones
    tokenizer, _ = load_tokenizer(folder)
    if tokenizer is None:  # sglang_model / verl say why a tokenizer does not load
        return
    limit = int(data.max_prompt_length)
    for file in files:
        lengths = prompt_lengths(config, Path(os.path.expanduser(file)), tokenizer)
        over = sum(n > limit for n in lengths)
        if not over:
            continue
        line = (f"data.val_files: {file}: {over} of {len(lengths)} rows are longer than data.max_prompt_length={limit} "
                f"as verl's overlong filter renders them (with the run's tool schemas; longest {max(lengths)} tokens) "
                f"and would be dropped; set data.filter_overlong_prompts=false or a longer data.max_prompt_length")
        if over == len(lengths):
            report.error(line.replace("would be dropped", "would ALL be dropped: no metric for this file"))
        else:
            report.warn(line)
