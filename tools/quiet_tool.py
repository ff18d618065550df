"""The recipe's tools' base: verl's BaseTool, built without printing its schema, and each tool's one home.

A tool is one class on this base (its file in tools/) and a tool-set YAML in config/tool_config/ naming it. The class
holds everything about the tool: its schema (`SCHEMA`, what the model is told; the tool's name is the schema's), the
system prompt's sentence about it (`PROMPT`, else one built from the schema) and what its `create` gets per row
(`row_kwargs`, written into every row's `tools_kwargs` by data prep). verl's loader
(verl/tools/tool_registry.py `initialize_tools_from_config`) takes the schema from the class when the YAML entry has
no `tool_schema`.

verl 0.9.1's BaseTool.__init__ (verl/tools/base_tool.py) prints each tool's schema as 19 lines of JSON, in every
process that loads the tool config: the launcher's preflight, the trainer's two datasets, every agent-loop
worker (~95 lines per launch of the CPU smoke). The schema is in the tool's module and in the dry run's config.
"""

from __future__ import annotations

from typing import ClassVar

from verl.tools.base_tool import BaseTool
from verl.tools.schemas import OpenAIFunctionToolSchema


class QuietTool(BaseTool):
    # What the model is told about the tool (the chat template renders it); its function name is the tool's name.
    SCHEMA: ClassVar[OpenAIFunctionToolSchema]
    # The system prompt's sentence about the tool, `{name}` standing for its name; None: config/system_prompt.yaml's
    # `tool` sentence, filled with the schema's name and description.
    PROMPT: ClassVar[str | None] = None

    def __init__(self, config: dict, tool_schema: OpenAIFunctionToolSchema | None):
        # the three attributes BaseTool.__init__ sets, in the same way, without its print
        self.config = config
        self.tool_schema = tool_schema or self.get_openai_tool_schema()
        self.name = self.tool_schema.function.name

    def get_openai_tool_schema(self) -> OpenAIFunctionToolSchema:
        return self.SCHEMA

    @classmethod
    def row_kwargs(cls, ground_truth: str, row_index: int) -> dict:
        """What `create` gets for one row (verl hands it `tools_kwargs[<name>]["create_kwargs"]`). The row index only:
        an honest tool never sees the answer, parquet cannot store an empty struct, and the index labels the tool's
        calls in traces."""
        return {"row_index": row_index}
