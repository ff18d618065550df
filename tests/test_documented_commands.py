"""Every command the README and the docs show in a code block names a script that exists, or a command the recipe
installs (pyproject.toml's [project.scripts]), and answers --help: a shell script through scripts/help.sh, a Python
script or an installed command with its usage, without importing the heavy stack (torch, verl, ray, weave,
transformers, wandb), so --help is instant everywhere. A renamed or removed command, or one whose --help breaks,
fails here instead of in a reader's terminal."""

import json
import re
import subprocess
import sys
import tomllib

import pytest

from recipes.constants import REPO_ROOT

pytestmark = pytest.mark.repo

FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.M | re.S)
COMMAND = re.compile(r"(?<![\w./-])((?:scripts|data_prep)/[\w-]+\.(?:sh|py)|gsm8k-[a-z]+(?:-[a-z]+)*)\b")
INSTALLED = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["scripts"]
HEAVY = ("torch", "verl", "ray", "weave", "transformers", "wandb")
# runs a script's or an installed command's --help in this interpreter and reports what it imported
HELP_PROBE = f"HEAVY = {HEAVY!r}\n" + """
import contextlib, importlib.metadata, io, json, runpy, sys
sys.argv = [sys.argv[1], "--help"]
out = io.StringIO()
try:
    with contextlib.redirect_stdout(out):
        if sys.argv[0].endswith(".py"):
            runpy.run_path(sys.argv[0], run_name="__main__")
        else:  # as the installed command's own script calls it
            sys.exit(importlib.metadata.entry_points(group="console_scripts", name=sys.argv[0])[sys.argv[0]].load()())
    code = 0
except SystemExit as e:
    code = e.code or 0
print(json.dumps({"code": code, "out": out.getvalue(), "heavy": [m for m in HEAVY if m in sys.modules]}))
"""


# a code block that is a whole file to add, its path on the first line (docs/how-to.md's new tool and dataset):
# the commands after it run that file, which tests/test_extending.py adds and runs in a copy of the repo
ADDED_FILE = re.compile(r"\A# ((?:tools|data_prep|config)/[\w/]+\.(?:py|yaml))\n")


def documented_scripts() -> dict[str, list[str]]:
    """script -> the pages whose code blocks run it (not the scripts a page adds)."""
    found: dict[str, list[str]] = {}
    for page in [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md"))]:
        blocks = FENCE.findall(page.read_text())
        added = {m.group(1) for block in blocks if (m := ADDED_FILE.match(block))}
        for block in blocks:
            for script in COMMAND.findall(block):
                if script not in added:
                    found.setdefault(script, []).append(page.name)
    return found


def test_the_docs_code_blocks_run_scripts_and_each_exists():
    found = documented_scripts()
    assert {"scripts/smoke_cpu.sh", "scripts/run_tests.sh", "scripts/install_gpu_env.sh",
            "scripts/smoke_1gpu.sh"} <= set(found), sorted(found)  # the README's first commands at least
    missing = [f"{script} (in {', '.join(sorted(set(pages)))})" for script, pages in sorted(found.items())
               if not (REPO_ROOT / script).is_file() and script not in INSTALLED]
    assert missing == []


@pytest.mark.parametrize("script", sorted(documented_scripts()))
def test_each_documented_script_answers_help_without_the_heavy_stack(script, tmp_path):
    path = REPO_ROOT / script
    if not path.is_file() and script not in INSTALLED:
        pytest.skip("missing: the test above names it")
    if path.suffix == ".sh":
        proc = subprocess.run(["bash", str(path), "--help"], capture_output=True, text=True, timeout=60,
                              cwd=tmp_path, stdin=subprocess.DEVNULL, env={"PATH": "/usr/bin:/bin"})
        assert proc.returncode == 0 and proc.stdout.startswith(f"scripts/{path.name}:"), proc.stdout + proc.stderr
        return
    proc = subprocess.run([sys.executable, "-c", HELP_PROBE, script if script in INSTALLED else str(path)],
                          capture_output=True, text=True, timeout=60, cwd=tmp_path, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr[-3000:]
    probe = json.loads(proc.stdout.strip().splitlines()[-1])
    usage = f"usage: {script}" if script in INSTALLED else "usage:"
    assert probe["code"] == 0 and usage in probe["out"], probe
    assert probe["heavy"] == [], f"{script} --help imports {probe['heavy']}: import them after parsing arguments"
