"""The house's layers, read from the files with Python's own parser:
- what users run (recipes/, tools/, data_prep/, scripts/, config/) never names the test doubles (tests/testkit/,
  imported as `testkit`), which are not installed;
- recipes/harness/ (stand-ins, the in-process agent loop, the learning checks, benchmark internals, the local
  cluster) is kept apart: nothing else under recipes/, tools/ or data_prep/ imports it, and no config a training run
  composes names it;
- the rooms (each top-level module or package of recipes/, and tools/, data_prep/) import each other without a
  circle."""

import ast
import json
import re
from collections import defaultdict

import yaml

from recipes.constants import REPO_ROOT

PRODUCT_DIRS = ("recipes", "tools", "data_prep", "scripts", "config")
PACKAGES = ("recipes", "tools", "data_prep")
HARNESS = "recipes.harness"
MOVED_POINTERS = REPO_ROOT / "recipes" / "__init__.py"


def product_files():
    return sorted(p for d in PRODUCT_DIRS for p in (REPO_ROOT / d).rglob("*")
                  if p.is_file() and "__pycache__" not in p.parts)


def package_modules():
    return sorted(p for d in PACKAGES for p in (REPO_ROOT / d).rglob("*.py") if "__pycache__" not in p.parts)


def imported_modules(path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.update([node.module, *(f"{node.module}.{alias.name}" for alias in node.names)])
    return names


def named_modules(path) -> set[str]:
    """Imports, and dotted names in string constants (importlib, hydra `_target_`s, `-m` command lines); recipes'
    own __init__ only points at where moved modules went."""
    strings = {n.value for n in ast.walk(ast.parse(path.read_text()))
               if isinstance(n, ast.Constant) and isinstance(n.value, str)} if path != MOVED_POINTERS else set()
    return imported_modules(path) | {m for s in strings for m in re.findall(r"\brecipes(?:\.\w+)+", s)}


def in_harness(path) -> bool:
    return path.relative_to(REPO_ROOT).parts[:2] == ("recipes", "harness")


def test_no_product_file_names_the_test_doubles():
    naming = [str(p.relative_to(REPO_ROOT)) for p in product_files() if "testkit" in p.read_text(errors="replace")]
    assert naming == []


def test_the_test_doubles_are_not_installed_as_a_product_package():
    # the one `include = [...]` of [tool.setuptools.packages.find] (no tomllib on Python 3.10)
    (include,) = re.findall(r"^include = \[(.*)\]$", (REPO_ROOT / "pyproject.toml").read_text(), re.M)
    assert re.findall(r'"([^"]+)"', include) == ["recipes*", "tools*", "data_prep*"]
    assert not (REPO_ROOT / "testkit").exists()


def test_nothing_outside_the_harness_imports_it():
    importing = [str(p.relative_to(REPO_ROOT)) for p in package_modules()
                 if not in_harness(p) and any(m.startswith(HARNESS) for m in named_modules(p))]
    assert importing == []


def test_no_training_config_names_the_harness():
    """No value of a config file (comments may point readers there) loads or names a harness module."""
    naming = [str(p.relative_to(REPO_ROOT)) for p in (REPO_ROOT / "config").rglob("*.yaml")
              if re.search(r"recipes[./]harness", json.dumps(yaml.safe_load(p.read_text())))]
    assert naming == []


def room(module: str) -> str | None:
    """The room a dotted module name belongs to: `recipes.<top>` or `tools` / `data_prep`; None for others."""
    parts = module.split(".")
    if parts[0] in ("tools", "data_prep"):
        return parts[0]
    if parts[0] == "recipes" and len(parts) > 1:
        return f"recipes.{parts[1]}"
    return None


def room_of(path) -> str:
    return room(".".join(path.relative_to(REPO_ROOT).with_suffix("").parts))


def test_the_rooms_import_each_other_without_a_circle():
    arrows: dict[str, set[str]] = defaultdict(set)
    for path in package_modules():
        here = room_of(path)
        arrows[here] |= {r for m in imported_modules(path) if (r := room(m)) and r != here}
    done, path_now = set(), []

    def visit(node: str) -> list[str] | None:
        if node in path_now:
            return path_now[path_now.index(node):] + [node]
        if node in done:
            return None
        path_now.append(node)
        for nxt in sorted(arrows[node]):
            if circle := visit(nxt):
                return circle
        path_now.pop()
        done.add(node)
        return None

    circles = [c for r in sorted(arrows) if (c := visit(r))]
    assert circles == [], f"rooms that import each other in a circle: {' -> '.join(circles[0])}"
