"""Read verl's generation dumps: one `<step>.jsonl` per step, one line per rollout with input, output,
gts, score, step and the reward function's extra keys (recipes/gsm8k/answers.py REWARD_KEYS)."""

from __future__ import annotations

import json
from pathlib import Path

from recipes.gsm8k.reward_keys import ACC, SCORE, TOOL_CALLS
from recipes.gsm8k.trajectory import count_tool_call_tags


def load_dump_dir(folder: str | Path) -> list[dict]:
    folder = Path(folder)
    files = sorted(folder.glob("*.jsonl"), key=lambda p: int(p.stem) if p.stem.isdigit() else -1)
    if not files:
        raise FileNotFoundError(f"no <step>.jsonl dumps in {folder} "
                                "(set trainer.rollout_data_dir / validation_data_dir)")
    records = []
    for path in files:
        records.extend(parse_dump(path, path.read_text(encoding="utf-8")))
    return records


def parse_dump(path: Path, text: str, required: tuple[str, ...] = ()) -> list[dict]:
    """The normalised lines of one dump file's text; ValueError naming `path:line` for a bad line."""
    records = []
    # split on "\n" only: verl writes ensure_ascii=False, so a line may hold U+2028 that splitlines() would cut
    for line_no, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            raise ValueError(f"{path}:{line_no}: not JSON ({err.msg})") from None
        if not isinstance(record, dict):
            raise ValueError(f"{path}:{line_no}: not a JSON object")
        missing = [key for key in required if key not in record]
        if missing:
            raise ValueError(f"{path}:{line_no}: missing {', '.join(missing)} (not a verl generation dump line?)")
        records.append(normalise(record, path))
    return records


def normalise(record: dict, path: Path) -> dict:
    """Fill what older dumps or other reward functions may lack, from the text itself."""
    out = dict(record)
    out["step"] = int(record.get("step", path.stem if path.stem.isdigit() else 0))
    out[SCORE] = float(record.get(SCORE, 0.0))
    out[ACC] = float(record[ACC]) if ACC in record else float(out[SCORE] >= 1.0)
    text = str(record.get("output", ""))
    out[TOOL_CALLS] = int(record[TOOL_CALLS]) if TOOL_CALLS in record else count_tool_call_tags(text)
    out["response_chars"] = len(text)
    return out
