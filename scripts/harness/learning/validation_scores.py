"""Scores of a launch that validates tools on and tools off together (the GPU learning check's one launch).

verl dumps each validation as `<validation_data_dir>/<step>.jsonl` (step 0 before training, N after the last step),
the rows of both validation files in one file; the reward's `tool_set` key splits them, and the one scorer of dump
lines (recipes/results/scoring.py) summarizes each part as the CPU check's evaluations are summarized, plus the mean
of the reward's `turns`. verl's own metrics of the same validation, one set per data_source
(`val-core/<data_source>/acc/mean@1`, `val-aux/<data_source>/<reward key>/mean@1`, from its `file` logger), are
compared with them: two readings of one validation that must agree.
"""

from __future__ import annotations

import json
from pathlib import Path
from statistics import mean

from data_prep.gsm8k_rows import DATA_SOURCE, DATA_SOURCE_NO_TOOLS
from recipes.gsm8k.reward_keys import ACC, CALLED_TOOL, TOOL_CALLS, TOOL_SET, TURNS
from recipes.gsm8k.tool_sets import NO_TOOLS
from recipes.results.dumps import parse_dump
from recipes.results.scoring import summarize

# the summary's key, and the reward key whose per-data_source mean verl logs as the same figure
AGREEING = (("acc", ACC), ("tool_call_rate", CALLED_TOOL), ("tool_calls_per_answer", TOOL_CALLS),
            ("turns_mean", TURNS))


def data_source_of(tool_set: str) -> str:
    return DATA_SOURCE_NO_TOOLS if tool_set == NO_TOOLS else DATA_SOURCE


def summaries(dump: Path) -> dict[str, dict]:
    """{tool set: summary} of one validation dump; each summary also has `acc` (by the reward's own method, which
    verl reports) and `turns_mean`."""
    parts: dict[str, list[dict]] = {}
    for record in parse_dump(dump, dump.read_text(encoding="utf-8")):
        if TOOL_SET not in record:
            raise ValueError(f"{dump}: a line without the reward's {TOOL_SET!r} key: the run's reward function must "
                             "be recipes/gsm8k/reward.py")
        parts.setdefault(record[TOOL_SET], []).append(record)
    return {tool_set: {**summarize(rows), "acc": mean(r[ACC] for r in rows),
                       "turns_mean": mean(int(r[TURNS]) for r in rows)} for tool_set, rows in parts.items()}


def verl_metrics(metrics_file: Path, step: int) -> dict:
    """What verl's `file` logger recorded at `step` (its last record of that step; {} when there is none)."""
    found = {}
    for line in metrics_file.read_text().splitlines():
        if line.strip():
            record = json.loads(line)
            if record.get("step") == step:
                found = record.get("data") or {}
    return found


def disagreements(parts: dict[str, dict], metrics: dict) -> list[str]:
    """Each figure of `parts` (summaries()) that verl's metrics of the same validation give otherwise, one line each."""
    out = []
    for tool_set, summary in parts.items():
        source = data_source_of(tool_set)
        for key, reward_key in AGREEING:
            section = "val-core" if reward_key == ACC else "val-aux"
            name = f"{section}/{source}/{reward_key}/mean@1"
            if name not in metrics:
                out.append(f"{tool_set}: verl logged no {name}")
            elif abs(float(metrics[name]) - summary[key]) > 1e-6:
                out.append(f"{tool_set}: {key} {summary[key]:.4f} from the dump, {name} {float(metrics[name]):.4f}")
    return out
