"""Names several parts of the recipe must agree on are defined in one module each (recipes/constants.py, or the
stand-ins' own package for the stand-ins): a second copy could drift. Read from the source with Python's own
parser, docstrings and comments aside."""

import ast

import pytest

from recipes.constants import REPO_ROOT

pytestmark = pytest.mark.repo

CODE_DIRS = ("recipes", "tools", "data_prep", "scripts", "tests/testkit")


def code_files():
    return sorted(p for d in CODE_DIRS for p in (REPO_ROOT / d).rglob("*.py"))


def docstrings(tree) -> set[int]:
    nodes = [n for n in ast.walk(tree) if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef,
                                                           ast.AsyncFunctionDef))]
    return {id(n.body[0].value) for n in nodes if n.body and isinstance(n.body[0], ast.Expr)}


def modules_with_literal(value: str) -> list[str]:
    found = []
    for path in code_files():
        tree = ast.parse(path.read_text())
        skip = docstrings(tree)
        if any(isinstance(n, ast.Constant) and n.value == value and id(n) not in skip for n in ast.walk(tree)):
            found.append(str(path.relative_to(REPO_ROOT)))
    return found


REWARD_KEY_NAMES = ("acc_strict", "acc_flexible", "num_bad_tool_calls", "tool_bonus", "ref_ops", "called_tool")


@pytest.mark.parametrize("value, home", [("hf_cpu", "recipes/constants.py"),
                                         ("GSM8K_RECIPE_TRACE_RELAY", "recipes/trace_relay/names.py"),
                                         # a tool's name: its schema, in its class (its tool set YAML is a file)
                                         ("calc_gsm8k_reward", "tools/gsm8k_reward_tool.py"),
                                         # the reward's keys: one list, recipes/gsm8k/reward_keys.py REWARD_KEYS
                                         *[(key, "recipes/gsm8k/reward_keys.py") for key in REWARD_KEY_NAMES]])
def test_a_shared_name_is_written_once(value, home):
    assert modules_with_literal(value) == [home]


def test_repo_root_is_defined_once():
    defining = [str(p.relative_to(REPO_ROOT)) for p in code_files()
                if any(isinstance(n, ast.Assign) and any(getattr(t, "id", None) == "REPO_ROOT" for t in n.targets)
                       for n in ast.parse(p.read_text()).body)]
    assert defining == ["recipes/constants.py"]
