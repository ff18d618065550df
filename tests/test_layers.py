"""The house's layers, read from the files with Python's own parser:
- what users run (recipes/, tools/, data_prep/, scripts/, config/) never names the test doubles (tests/testkit/,
  imported as `testkit`), which are not installed;
- the installed packages (recipes/, tools/, data_prep/) never import what lives with the scripts (scripts/harness/:
  stand-ins, the CPU backend, the in-process agent loop, the learning checks, the probe) or the benchmarks' programs,
  and no config of a GPU run names them;
- the rooms (each top-level module or package of recipes/, and tools/, data_prep/) import each other without a
  circle."""

import ast
import json
import re
from collections import defaultdict

import pytest
import yaml

from recipes.constants import REPO_ROOT

pytestmark = pytest.mark.repo

PRODUCT_DIRS = ("recipes", "tools", "data_prep", "scripts", "config")
PACKAGES = ("recipes", "tools", "data_prep")
SCRIPTS = REPO_ROOT / "scripts"
# what lives with the scripts: the harness package and each Python program of scripts/ (importable as a module
# where scripts/ is on the path)
SCRIPT_MODULES = ("harness", *sorted(p.stem for p in SCRIPTS.glob("*.py")))
# profiles of runs on the CPU backend (scripts/harness/cpu_backend): they name it, as they must
CPU_PROFILES = ("cpu_smoke.yaml", "cpu_learn.yaml")


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
    """Imports, and the harness's dotted names in string constants (importlib, hydra `_target_`s, `-m` command
    lines)."""
    strings = {n.value for n in ast.walk(ast.parse(path.read_text()))
               if isinstance(n, ast.Constant) and isinstance(n.value, str)}
    return imported_modules(path) | {m for s in strings for m in re.findall(r"\bharness(?:\.\w+)+", s)}


def is_script_module(module: str) -> bool:
    return module.split(".")[0] in SCRIPT_MODULES


def test_no_product_file_names_the_test_doubles():
    naming = [str(p.relative_to(REPO_ROOT)) for p in product_files() if "testkit" in p.read_text(errors="replace")]
    assert naming == []


def test_the_test_doubles_are_not_installed_as_a_product_package():
    # the one `include = [...]` of [tool.setuptools.packages.find] (no tomllib on Python 3.10)
    (include,) = re.findall(r"^include = \[(.*)\]$", (REPO_ROOT / "pyproject.toml").read_text(), re.M)
    assert re.findall(r'"([^"]+)"', include) == ["recipes*", "tools*", "data_prep*"]
    assert not (REPO_ROOT / "testkit").exists()


def test_the_installed_packages_import_nothing_of_the_scripts():
    importing = [f"{p.relative_to(REPO_ROOT)}: {m}" for p in package_modules()
                 for m in sorted(named_modules(p)) if is_script_module(m)]
    assert importing == []


def test_no_gpu_run_config_names_the_harness():
    """No value of a config file (comments may point readers there) loads or names a harness module, but the CPU
    profiles', which run on the CPU backend."""
    naming = [str(p.relative_to(REPO_ROOT)) for p in (REPO_ROOT / "config").rglob("*.yaml")
              if p.name not in CPU_PROFILES and re.search(r"\bharness\.", json.dumps(yaml.safe_load(p.read_text())))]
    assert naming == []


def test_the_cpu_profiles_name_the_cpu_backend_that_exists():
    for name in CPU_PROFILES:
        values = json.dumps(yaml.safe_load((REPO_ROOT / "config" / "profile" / name).read_text()))
        for module in re.findall(r"\bharness(?:\.\w+)+", values):
            assert (SCRIPTS / (module.replace(".", "/") + ".py")).is_file(), (name, module)


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
