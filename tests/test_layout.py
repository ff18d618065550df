"""docs/layout.md against the tree: every module of the recipe's packages and of the harness, every command in
scripts/ and every config file is named on the page (a file added without a line there fails here); every path the
page names exists (tests/test_docs.py holds that for every page)."""

import pytest

from recipes.constants import REPO_ROOT

pytestmark = pytest.mark.repo

PAGE = REPO_ROOT / "docs" / "layout.md"
NAMED_AS_A_FOLDER = ("scripts/harness/bench_rollout/",)  # one benchmark's package: the page names the folder


def files_to_name() -> list[str]:
    modules = [p for d in ("recipes", "tools", "data_prep", "scripts/harness") for p in (REPO_ROOT / d).rglob("*.py")
               if p.name != "__init__.py" and "__pycache__" not in p.parts]
    commands = [p for p in (REPO_ROOT / "scripts").iterdir() if p.is_file()]
    configs = list((REPO_ROOT / "config").glob("*.yaml"))
    paths = sorted(str(p.relative_to(REPO_ROOT)) for p in [*modules, *commands, *configs])
    return [p for p in paths if not p.startswith(NAMED_AS_A_FOLDER)]


def test_the_layout_page_names_every_file():
    page = PAGE.read_text()
    assert len(files_to_name()) > 100  # the whole tree is read, not an empty glob
    unnamed = [path for path in files_to_name() if f"`{path}`" not in page]
    assert unnamed == [], "files docs/layout.md does not name (add a line for each):\n" + "\n".join(unnamed)
    folders = [folder for folder in NAMED_AS_A_FOLDER if f"`{folder}`" not in page]
    assert folders == []
