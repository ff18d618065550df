"""config/tool_config/*.yaml through verl's own loader: names, classes and schemas agree with the tool
sets that data prep writes into every row's tools_kwargs."""

import pytest
from omegaconf import OmegaConf

from recipes.gsm8k.tool_sets import TOOL_SETS, get_tool_set
from tools.calculator import CalculatorTool
from tools.gsm8k_reward_tool import Gsm8kRewardTool

pytestmark = pytest.mark.unit

CLASSES = {"calculator": CalculatorTool, "calc_gsm8k_reward": Gsm8kRewardTool}
ARGUMENTS = {"calculator": "expression", "calc_gsm8k_reward": "answer"}
SCHEMAS = {name: cls.SCHEMA for name, cls in CLASSES.items()}


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


def test_the_tool_sets_are_the_yamls_and_none():
    """What data prep's --tool_set and the launcher's TOOL_SET offer: each YAML of config/tool_config/ (its
    `description` the --help line), and none; nothing else lists them."""
    from recipes.constants import TOOL_CONFIG_DIR

    assert list(TOOL_SETS) == [*sorted(p.stem for p in TOOL_CONFIG_DIR.glob("*.yaml")), "none"]
    for tool_set in TOOL_SETS.values():
        if tool_set.config_path:
            assert tool_set.description == OmegaConf.load(tool_set.config_path).description


def test_a_tools_prompt_sentence_comes_from_its_class_or_its_schema():
    """The system prompt names every tool of the set: the class's PROMPT, or config/system_prompt.yaml's `tool`
    sentence filled with the schema's name and description."""
    from recipes.gsm8k.tool_sets import system_prompt_parts, tool_sentence

    template = system_prompt_parts()["tool"]
    calculator, checker = get_tool_set("both").loaded
    assert tool_sentence(calculator, template) == CalculatorTool.PROMPT.format(name="calculator")
    assert tool_sentence(checker, template) in get_tool_set("both").system_prompt

    class Plain:  # a verl tool without a PROMPT of its own
        tool_schema = CalculatorTool.SCHEMA

    sentence = tool_sentence(Plain(), template)
    assert "`calculator`" in sentence and CalculatorTool.SCHEMA.function.description in sentence


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
