"""Tool sets: which tools a run offers, the system prompt that tells the model about them, and the per-row
`tools_kwargs` that verl's ToolAgentLoop hands to each tool's `create`.

A tool set is a YAML in config/tool_config/ (its file name is the set's name, `TOOL_SET` and data prep's
`--tool_set`), listing tool classes as verl's loader reads them (`tools`) and, under `function_tool_path`, a file of
verl `@function_tool` functions (a path from the repo's root, which the launcher hands to
`multi_turn.function_tool_path`), plus `none` (no tools). Everything about a tool comes from its class or function,
loaded through verl's own `load_all_tools`: its name and schema, its sentence of the system prompt, what a class's
`create` gets per row (tools/quiet_tool.py; a function is stateless and gets nothing). The rest of the system prompt is
config/system_prompt.yaml. Data prep, the launcher's preflight and the reward read this module, so the prompt, the
tools in the YAML and the kwargs in the parquet cannot drift apart.
"""

from __future__ import annotations

from functools import cached_property, lru_cache
from pathlib import Path

import yaml

from recipes.constants import ANSWER_MARKER, REPO_ROOT, SYSTEM_PROMPT_CONFIG, TOOL_CONFIG_DIR

NO_TOOLS = "none"
DEFAULT_TOOL_SET = "calculator"  # config/tool_config/calculator.yaml
PROMPT_PARTS = ("before_tools", "tool", "after_tools")


class ToolSet:
    def __init__(self, name: str, config_path: Path | None):
        self.name = name
        self.config_path = config_path  # the YAML verl loads (`multi_turn.tool_config_path`); None for no tools

    @cached_property
    def description(self) -> str:
        """The YAML's `description` (verl's loader reads only `tools`), for data prep's --help."""
        if self.config_path is None:
            return "no tools: the plain-reasoning baseline (evaluation with tools off)"
        return str((yaml.safe_load(self.config_path.read_text()) or {}).get("description") or self.name)

    @cached_property
    def function_tool_path(self) -> str | None:
        """The YAML's `function_tool_path`: its file of verl @function_tool functions, from the repo's root."""
        if self.config_path is None:
            return None
        path = (yaml.safe_load(self.config_path.read_text()) or {}).get("function_tool_path")
        return str(path) if path else None

    @cached_property
    def loaded(self) -> list:
        """The set's tools, built by verl's own loader from the YAML: its classes (the schemas from the classes),
        then its file's functions (the schemas from their type hints and docstrings)."""
        if self.config_path is None:
            return []
        from verl.tools.tool_registry import load_all_tools

        functions = str(REPO_ROOT / self.function_tool_path) if self.function_tool_path else None
        return load_all_tools(tool_config_path=str(self.config_path), function_tool_path=functions)

    @property
    def tools(self) -> tuple[str, ...]:
        """The tools' names as the model sees them (their schemas' function names), in the YAML's order."""
        return tuple(tool.name for tool in self.loaded)

    @cached_property
    def system_prompt(self) -> str:
        """Built once per process (data prep writes it into every row)."""
        parts = system_prompt_parts()
        return " ".join([parts["before_tools"], *(tool_sentence(tool, parts["tool"]) for tool in self.loaded),
                         parts["after_tools"]])

    def chat_schemas(self) -> list[dict]:
        """The tool schemas as verl's ToolAgentLoop hands them to the chat template."""
        return [tool.tool_schema.model_dump(exclude_unset=True, exclude_none=True) for tool in self.loaded]

    def tools_kwargs(self, ground_truth: str, index: int) -> dict:
        """Per-row kwargs, keyed by tool name, in the `{name: {"create_kwargs": {...}}}` shape verl expects: what each
        tool's class says its `create` gets (the row index unless it says otherwise)."""
        return {tool.name: {"create_kwargs": _row_kwargs(tool, ground_truth, index)} for tool in self.loaded}


def _row_kwargs(tool, ground_truth: str, index: int) -> dict:
    row_kwargs = getattr(type(tool), "row_kwargs", None)  # a plain verl BaseTool has none
    return row_kwargs(ground_truth, index) if row_kwargs else {"row_index": index}


def tool_sentence(tool, template: str) -> str:
    """The system prompt's sentence about one tool: its class's PROMPT, else the config's template, filled with the
    tool's name and its schema's description."""
    function = tool.tool_schema.function
    text = getattr(type(tool), "PROMPT", None) or template
    return text.format(name=function.name, description=function.description or "", answer_marker=ANSWER_MARKER)


def system_prompt_parts() -> dict[str, str]:
    """config/system_prompt.yaml's parts; ValueError naming the file when one is missing."""
    parts = yaml.safe_load(SYSTEM_PROMPT_CONFIG.read_text()) or {}
    missing = [key for key in PROMPT_PARTS if not isinstance(parts.get(key), str)]
    if missing:
        raise ValueError(f"{SYSTEM_PROMPT_CONFIG}: no text for {', '.join(missing)} (it needs "
                         f"{', '.join(PROMPT_PARTS)})")
    # the tool sentence is filled per tool (tool_sentence); the others here, by name only: any other brace stays
    return {key: parts[key] if key == "tool" else parts[key].replace("{answer_marker}", ANSWER_MARKER)
            for key in PROMPT_PARTS}


def tool_set_names() -> list[str]:
    """Every tool set: each YAML of config/tool_config/, and none."""
    return [*sorted(p.stem for p in TOOL_CONFIG_DIR.glob("*.yaml")), NO_TOOLS]


TOOL_SETS: dict[str, ToolSet] = {
    name: ToolSet(name, None if name == NO_TOOLS else TOOL_CONFIG_DIR / f"{name}.yaml") for name in tool_set_names()
}


def get_tool_set(name: str) -> ToolSet:
    try:
        return TOOL_SETS[name]
    except KeyError:
        raise ValueError(f"unknown tool set {name!r}; choose one of: {', '.join(TOOL_SETS)} (a tool set is a YAML in "
                         f"{TOOL_CONFIG_DIR})") from None


@lru_cache(maxsize=1)
def known_tools() -> frozenset[str]:
    """The name of every tool of every tool set: what a call may name when the row's own offer is not known
    (re-scoring a dump offline)."""
    return frozenset(name for tool_set in TOOL_SETS.values() for name in tool_set.tools)
