"""A dry run (and the preflight of every launch) makes no network call the user did not ask for. The launcher
runs with tests/testkit/no_network on PYTHONPATH, which refuses and logs every attempt of its Python processes
to reach a host other than loopback, and without WANDB_ERROR_REPORTING set, as in a user's shell."""

import os
import subprocess
import sys

import pytest

from recipes.constants import REPO_ROOT
from testkit.launcher import run_script

pytestmark = pytest.mark.integration

NO_NETWORK = REPO_ROOT / "tests" / "testkit" / "no_network"


def no_network_env(log) -> dict[str, str]:
    return {"NO_NETWORK_LOG": str(log), "PYTHONPATH": os.pathsep.join([str(NO_NETWORK), os.environ["PYTHONPATH"]])}


def test_a_tracing_dry_run_reaches_no_host(prepared_data_dir, tmp_path, monkeypatch):
    monkeypatch.delenv("WANDB_ERROR_REPORTING", raising=False)  # the conftest sets it; a user's shell does not
    log = tmp_path / "outbound.log"
    proc = run_script("run_gsm8k_grpo.sh", prepared_data_dir, DRY_RUN="1", OUTPUT_DIR=str(tmp_path / "out"),
                      **no_network_env(log))
    assert proc.returncode == 0, proc.stderr
    assert "[traces] Weave traces: https://wandb.ai/" in proc.stderr  # the profile traces
    assert not log.exists(), log.read_text()


def test_the_guard_sees_what_importing_weave_reaches_for(tmp_path, monkeypatch):
    """The check above can fail: weave's import alone starts its error reporting, which calls its service."""
    monkeypatch.delenv("WANDB_ERROR_REPORTING", raising=False)
    log = tmp_path / "outbound.log"
    env = {**os.environ, **no_network_env(log)}
    proc = subprocess.run([sys.executable, "-c", "import weave"], env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "sentry.io" in log.read_text()


@pytest.mark.parametrize("base_url", ["https://api.wandb.ai", "https://api.wandb.ai/", "https://wandb.example.com",
                                      "https://api.acme.wandb.io", "https://api.example.com", "http://localhost:8080"])
@pytest.mark.parametrize("app_url", [None, "https://app.example.com/"])
def test_the_link_built_without_weave_is_weaves_own(monkeypatch, base_url, app_url):
    from weave.trace.urls import project_weave_root_url

    from recipes.tracing.location import weave_project_url

    monkeypatch.setenv("WANDB_BASE_URL", base_url)
    if app_url:
        monkeypatch.setenv("WANDB_APP_URL", app_url)
    else:
        monkeypatch.delenv("WANDB_APP_URL", raising=False)
    assert weave_project_url("gsm8k tool grpo", "team") == project_weave_root_url("team", "gsm8k tool grpo")
