"""Read verl's generation dumps: one `<step>.jsonl` per step, one line per rollout with input, output,
gts, score, step and the reward function's extra keys (acc, num_tool_calls, format_ok, pred, ...)."""

from __future__ import annotations

import json
from pathlib import Path

from recipes.trajectory import count_tool_call_tags


def load_dump_dir(folder: str | Path) -> list[dict]:
    folder = Path(folder)
    files = sorted(folder.glob("*.jsonl"), key=lambda p: int(p.stem) if p.stem.isdigit() else -1)
    if not files:
        raise FileNotFoundError(f"no <step>.jsonl dumps in {folder} (set trainer.rollout_data_dir / validation_data_dir)")
    records = []
    for path in files:
        for line_no, line in enumerate(path.open(encoding="utf-8"), start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as err:
                raise ValueError(f"{path}:{line_no}: not JSON ({err.msg})") from None
            records.append(normalise(record, path))
    return records


def normalise(record: dict, path: Path) -> dict:
    """Fill what older dumps or other reward functions may lack, from the text itself."""
    out = dict(record)
    out["step"] = int(record.get("step", path.stem if path.stem.isdigit() else 0))
    out["score"] = float(record.get("score", 0.0))
    out["acc"] = float(record["acc"]) if "acc" in record else float(out["score"] >= 1.0)
    text = str(record.get("output", ""))
    out["num_tool_calls"] = int(record["num_tool_calls"]) if "num_tool_calls" in record else count_tool_call_tags(text)
    out["response_chars"] = len(text)
    return out
