"""The repo passes ruff with the settings in pyproject.toml (line length, import order, pyflakes, bugbear)."""

import subprocess
import sys

import pytest

pytestmark = pytest.mark.repo


def test_ruff_finds_nothing(repo_root):
    proc = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "."], cwd=repo_root,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
