"""Tool sets: which tools a run offers, the system prompt that tells the model about them, and the per-row
`tools_kwargs` that verl's ToolAgentLoop hands to each tool's `create`.

Data prep, the tool YAMLs and the launcher's preflight all read this module, so the prompt, the tools in
the YAML and the kwargs in the parquet cannot drift apart.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from recipes.constants import ANSWER_MARKER, CALC_GSM8K_REWARD, CALCULATOR, TOOL_CONFIG_DIR

NO_TOOLS = "none"

_BASE_PROMPT = (
    "You are a careful math tutor solving grade-school word problems. "
    "Reason step by step before giving an answer."
)
_FINAL_ANSWER = f"End your reply with the final numeric answer on its own line as `{ANSWER_MARKER} <number>`."

# What the system prompt says about each tool. Honest tools never see the answer.
_TOOL_GUIDANCE = {
    CALCULATOR: (
        f"You can call the `{CALCULATOR}` tool to evaluate an arithmetic expression "
        "(+, -, *, /, **, parentheses, %). Use it for any computation you are not sure of, "
        "read its result, then continue your reasoning."
    ),
    CALC_GSM8K_REWARD: (
        f"After solving the problem, submit your answer with the `{CALC_GSM8K_REWARD}` tool at least once; "
        "it tells you whether the answer is correct, and you may revise it."
    ),
}


@dataclass(frozen=True)
class ToolSet:
    name: str
    tools: tuple[str, ...]
    description: str

    @property
    def config_path(self) -> Path | None:
        """The tool YAML verl loads for this set (`multi_turn.tool_config_path`); None for no tools."""
        return TOOL_CONFIG_DIR / f"{self.name}.yaml" if self.tools else None

    @property
    def system_prompt(self) -> str:
        return " ".join([_BASE_PROMPT, *(_TOOL_GUIDANCE[t] for t in self.tools), _FINAL_ANSWER])

    def chat_schemas(self) -> list[dict]:
        """The tool schemas as verl's ToolAgentLoop hands them to the chat template, loaded from this set's YAML by
        verl's own loader (the schemas live in the tool classes, not in the YAML)."""
        if self.config_path is None:
            return []
        from verl.tools.tool_registry import initialize_tools_from_config

        tools = initialize_tools_from_config(str(self.config_path))
        return [tool.tool_schema.model_dump(exclude_unset=True, exclude_none=True) for tool in tools]

    def tools_kwargs(self, ground_truth: str, index: int) -> dict:
        """Per-row kwargs, keyed by tool name, in the `{name: {"create_kwargs": {...}}}` shape verl expects."""
        return {tool: {"create_kwargs": _create_kwargs(tool, ground_truth, index)} for tool in self.tools}


def _create_kwargs(tool: str, ground_truth: str, index: int) -> dict:
    if tool == CALC_GSM8K_REWARD:
        return {"ground_truth": ground_truth}
    # The calculator must never see the answer. It gets the row index only: parquet cannot store an
    # empty struct, and the index also labels the tool's calls in traces.
    return {"row_index": index}


TOOL_SETS: dict[str, ToolSet] = {
    ts.name: ts
    for ts in (
        ToolSet(CALCULATOR, (CALCULATOR,), "an honest arithmetic calculator (default)"),
        ToolSet(
            CALC_GSM8K_REWARD,
            (CALC_GSM8K_REWARD,),
            "the original verl recipe's answer checker; it leaks correctness to the policy",
        ),
        ToolSet("both", (CALCULATOR, CALC_GSM8K_REWARD), "calculator and answer checker"),
        ToolSet(NO_TOOLS, (), "no tools: the plain-reasoning baseline (evaluation with tools off)"),
    )
}
DEFAULT_TOOL_SET = CALCULATOR


def get_tool_set(name: str) -> ToolSet:
    try:
        return TOOL_SETS[name]
    except KeyError:
        raise ValueError(f"unknown tool set {name!r}; choose one of: {', '.join(TOOL_SETS)}") from None
