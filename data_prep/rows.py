"""One row as verl's multi-turn tool agent loop reads it, for any dataset: the prompt (the tool set's system prompt,
then the question), the answer the reward compares against, the tools' per-row kwargs and the agent loop to run.

A row of a tool set without tools carries its own data_source (`<data_source>_no_tools`) and asks for the recipe's
loop that offers no tools, so one launch can validate the same model with tools on and off, reported apart."""

from __future__ import annotations

from recipes.constants import ABILITY, AGENT_NAME, AGENT_NAME_NO_TOOLS
from recipes.gsm8k.datasets import no_tools_source
from recipes.gsm8k.tool_sets import ToolSet


def verl_row(*, data_source: str, question: str, instruction: str, ground_truth: str, split: str, index: int,
             tool_set: ToolSet, extra_info: dict | None = None) -> dict:
    """The row; `instruction` follows the question in the user message (how to give the answer), `extra_info` adds to
    what every row carries (its split and index, the question, the tool set)."""
    info = {
        "split": split,
        "index": index,
        **(extra_info or {}),
        "question": question,
        "tool_set": tool_set.name,
        "need_tools_kwargs": bool(tool_set.tools),
        "interaction_kwargs": {"query": question, "ground_truth": ground_truth},
    }
    if tool_set.tools:  # parquet cannot store an empty struct: rows without tools carry no tools_kwargs
        info["tools_kwargs"] = tool_set.tools_kwargs(ground_truth, index)
    return {
        "data_source": data_source if tool_set.tools else no_tools_source(data_source),
        "prompt": [
            {"role": "system", "content": tool_set.system_prompt},
            {"role": "user", "content": f"{question} {instruction}".strip()},
        ],
        "ability": ABILITY,
        "reward_model": {"style": "rule", "ground_truth": ground_truth},
        "extra_info": info,
        "agent_name": AGENT_NAME if tool_set.tools else AGENT_NAME_NO_TOOLS,
    }
