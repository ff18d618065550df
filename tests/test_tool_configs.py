"""config/tool_config/*.yaml through verl's own loader: names, classes and schemas agree with the tool
sets that data prep writes into every row's tools_kwargs."""

import pytest
from omegaconf import OmegaConf

from recipes.tool_sets import TOOL_SETS, get_tool_set
from tools import calculator, gsm8k_reward_tool
from tools.calculator import CalculatorTool
from tools.gsm8k_reward_tool import Gsm8kRewardTool

CLASSES = {"calculator": CalculatorTool, "calc_gsm8k_reward": Gsm8kRewardTool}
ARGUMENTS = {"calculator": "expression", "calc_gsm8k_reward": "answer"}
SCHEMAS = {"calculator": calculator.SCHEMA, "calc_gsm8k_reward": gsm8k_reward_tool.SCHEMA}


@pytest.mark.parametrize("name", sorted(n for n, ts in TOOL_SETS.items() if ts.tools))
def test_yaml_loads_through_verl_and_matches_the_tool_set(name):
    from verl.tools.tool_registry import initialize_tools_from_config

    tool_set = get_tool_set(name)
    tools = initialize_tools_from_config(str(tool_set.config_path))
    assert [t.name for t in tools] == list(tool_set.tools)
    for tool in tools:
        assert type(tool) is CLASSES[tool.name]
        params = tool.tool_schema.function.parameters
        assert params.required == [ARGUMENTS[tool.name]] and list(params.properties) == [ARGUMENTS[tool.name]]
    # every tool the rows' tools_kwargs name is loaded, and nothing else
    assert set(tool_set.tools_kwargs("1", 0)) == {t.name for t in tools}


def test_loading_the_tools_prints_nothing(capfd):
    """verl's BaseTool prints each schema as JSON when built, in every process that loads tools; ours do not."""
    from verl.tools.tool_registry import initialize_tools_from_config

    capfd.readouterr()
    assert len(initialize_tools_from_config(str(get_tool_set("both").config_path))) == 2
    assert capfd.readouterr() == ("", "")


def test_each_schema_has_one_home_the_tool_class():
    """No tool set YAML repeats a schema (both.yaml used to copy the two others): verl's loader takes each tool's
    schema from its class when the YAML entry has none."""
    from verl.tools.tool_registry import initialize_tools_from_config

    for tool_set in (ts for ts in TOOL_SETS.values() if ts.tools):
        entries = OmegaConf.to_container(OmegaConf.load(tool_set.config_path))["tools"]
        assert not [e for e in entries if "tool_schema" in e], f"{tool_set.config_path.name} repeats a schema"
        for tool in initialize_tools_from_config(str(tool_set.config_path)):
            assert tool.tool_schema is SCHEMAS[tool.name]
