"""What made a data file's rows, checked against what the run will do with them: a data_source some dataset module
declares (the recipe's reward scores nothing else, and would stop the run at the first rollout), and the system
prompt config/system_prompt.yaml gives the rows' tool set now (data prepared before the prompt changed)."""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from recipes.constants import REPO_ROOT
from recipes.preflight.findings import Report

RECIPE_REWARD = REPO_ROOT / "recipes" / "rollout" / "reward.py"


def uses_recipe_reward(config: DictConfig) -> bool:
    path = OmegaConf.select(config, "reward.custom_reward_function.path")
    return bool(path) and Path(path).expanduser().resolve() == RECIPE_REWARD


def check_row_origin(config: DictConfig, path: Path, row: dict, report: Report) -> None:
    """`row`: the file's first row, with its data_source, prompt and extra_info."""
    if uses_recipe_reward(config):
        from recipes.gsm8k.datasets import UnknownDataSource, dataset_for

        try:
            dataset_for(row["data_source"])
        except UnknownDataSource as err:
            report.error(f"{path}: {err}")
    tool_set_name = (row.get("extra_info") or {}).get("tool_set")
    prompt = row.get("prompt") or []
    if not prompt or prompt[0].get("role") != "system":
        return
    from recipes.gsm8k.tool_sets import TOOL_SETS

    tool_set = TOOL_SETS.get(tool_set_name)
    if tool_set is not None and prompt[0].get("content") != tool_set.system_prompt:
        report.warn(f"{path}: its rows' system prompt is not the one config/system_prompt.yaml gives tool set "
                    f"{tool_set_name!r} now (data prepared before a change?); prepare the data again to train on it")
