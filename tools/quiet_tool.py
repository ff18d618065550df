"""The recipe's tools' base: verl's BaseTool, built without printing its schema.

verl 0.9.1's BaseTool.__init__ (verl/tools/base_tool.py) prints each tool's schema as 19 lines of JSON, in every
process that loads the tool config: the launcher's preflight, the trainer's two datasets, every agent-loop
worker (~95 lines per launch of the CPU smoke). The schema is in the tool's module and in the dry run's config.
"""

from __future__ import annotations

from verl.tools.base_tool import BaseTool
from verl.tools.schemas import OpenAIFunctionToolSchema


class QuietTool(BaseTool):
    def __init__(self, config: dict, tool_schema: OpenAIFunctionToolSchema | None):
        # the three attributes BaseTool.__init__ sets, in the same way, without its print
        self.config = config
        self.tool_schema = tool_schema or self.get_openai_tool_schema()
        self.name = self.tool_schema.function.name
