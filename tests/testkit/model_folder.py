"""The check every model folder the recipe writes must pass: its config.json carries `transformers_version`, so
transformers does not warn in every worker that the tokenizer "will lead to incorrect tokenization" (the launch
preflight's own check, recipes/preflight/checks.py: check_transformers_version)."""

from pathlib import Path

from recipes.preflight.checks import check_transformers_version
from recipes.preflight.findings import Report


def assert_carries_transformers_version(folder) -> None:
    report = Report()
    check_transformers_version(Path(folder) / "config.json", report)
    assert not report.warnings and not report.errors, report.warnings + report.errors
