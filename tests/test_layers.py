"""The house's layers: what users run (recipes/, tools/, data_prep/, scripts/, config/) never names the test doubles
(tests/testkit/, imported as `testkit`), which are not installed; nothing in a training run imports the stand-ins
that benchmarks and tests run against (recipes/standins/). Read from the files, with Python's own parser."""

import ast
import re

from recipes.constants import REPO_ROOT

PRODUCT_DIRS = ("recipes", "tools", "data_prep", "scripts", "config")


def product_files():
    return sorted(p for d in PRODUCT_DIRS for p in (REPO_ROOT / d).rglob("*")
                  if p.is_file() and "__pycache__" not in p.parts)


def imported_modules(path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.update([node.module, *(f"{node.module}.{alias.name}" for alias in node.names)])
    return names


def test_no_product_file_names_the_test_doubles():
    naming = [str(p.relative_to(REPO_ROOT)) for p in product_files() if "testkit" in p.read_text(errors="replace")]
    assert naming == []


def test_the_test_doubles_are_not_installed_as_a_product_package():
    # the one `include = [...]` of [tool.setuptools.packages.find] (no tomllib on Python 3.10)
    (include,) = re.findall(r"^include = \[(.*)\]$", (REPO_ROOT / "pyproject.toml").read_text(), re.M)
    assert re.findall(r'"([^"]+)"', include) == ["recipes*", "tools*", "data_prep*"]
    assert not (REPO_ROOT / "testkit").exists()


def test_no_training_module_imports_the_stand_ins():
    importing = [str(p.relative_to(REPO_ROOT)) for p in (REPO_ROOT / "recipes").rglob("*.py")
                 if "standins" not in p.parts and any(m.startswith("recipes.standins") for m in imported_modules(p))]
    assert importing == []
