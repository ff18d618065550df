"""The commands the recipe installs (pyproject.toml's [project.scripts]): the env holds exactly the declared ones
(its installed metadata names the same module and function), and each loads and answers --help under its own name,
as its script in the env's bin folder calls it. The upload command's help says what it does and how to run it."""

import importlib.metadata
import sys
import tomllib

import pytest

from recipes.constants import REPO_ROOT

pytestmark = pytest.mark.unit
DECLARED = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["scripts"]


def installed() -> dict[str, importlib.metadata.EntryPoint]:
    dist = importlib.metadata.distribution(tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["name"])
    return {ep.name: ep for ep in dist.entry_points if ep.group == "console_scripts"}


def test_the_env_holds_the_declared_commands():
    assert len(DECLARED) >= 6 and all(name.startswith("gsm8k-") for name in DECLARED)
    assert {name: ep.value for name, ep in installed().items()} == DECLARED, \
        "the env's install is not this pyproject.toml's: pip install -e . --no-deps (scripts/setup_cpu_env.sh)"


def run_help(name: str, monkeypatch, capsys) -> str:
    monkeypatch.setattr(sys, "argv", [name, "--help"])
    with pytest.raises(SystemExit) as ended:
        sys.exit(installed()[name].load()())
    assert ended.value.code in (0, None)
    return capsys.readouterr().out


@pytest.mark.parametrize("name", sorted(DECLARED))
def test_each_command_answers_help_under_its_own_name(name, monkeypatch, capsys):
    out = run_help(name, monkeypatch, capsys)
    assert out.startswith(f"usage: {name} "), out[:300]


def test_the_upload_commands_help_says_what_it_does(monkeypatch, capsys):
    out = " ".join(run_help("gsm8k-upload-traces", monkeypatch, capsys).split())
    assert "Send Weave traces kept by the trace relay to W&B" in out
    assert "gsm8k-upload-traces --spool outputs/<experiment>/trace_spool" in out
    assert "--spool SPOOL the relay's spool dir (OUTPUT_DIR/trace_spool)" in out
