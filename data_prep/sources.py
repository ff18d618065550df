"""Where GSM8K records come from: the original files (JSONL or parquet) or the Hugging Face hub."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

from data_prep.gsm8k_rows import InvalidRecord, SourceRecord
from recipes.constants import HUB_CONFIG, HUB_DATASET


class SourceError(RuntimeError):
    """The input cannot be read at all (missing file, unreachable hub); nothing is written."""


def find_split_file(input_dir: Path, split: str) -> Path:
    for name in (f"{split}.jsonl", f"{split}.parquet"):
        if (input_dir / name).is_file():
            return input_dir / name
    raise SourceError(
        f"no {split}.jsonl or {split}.parquet in {input_dir}; --input_dir expects GSM8K's original files "
        "(one JSON object per line with 'question' and 'answer')"
    )


def read_split_file(path: Path) -> Iterator[SourceRecord | InvalidRecord]:
    """Yield a record per row, or the InvalidRecord that row raised (the caller decides to stop or skip)."""
    if path.suffix == ".parquet":
        yield from _read_parquet(path)
    else:
        yield from _read_jsonl(path)


def _read_jsonl(path: Path) -> Iterator[SourceRecord | InvalidRecord]:
    index = 0
    with path.open(encoding="utf-8") as f:
        for line_no, line in enumerate(f, start=1):
            if not line.strip():
                continue
            location = f"{path}:{line_no}"
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as err:
                yield InvalidRecord(f"{location}: malformed JSON ({err.msg} at column {err.colno})")
                index += 1
                continue
            yield _record(obj, location, index)
            index += 1


def _read_parquet(path: Path) -> Iterator[SourceRecord | InvalidRecord]:
    import pyarrow.parquet as pq

    try:
        rows = pq.read_table(path).to_pylist()
    except Exception as err:  # pyarrow raises several types for corrupt files
        raise SourceError(f"{path}: not a readable parquet file ({err})") from None
    for i, obj in enumerate(rows):
        yield _record(obj, f"{path} row {i}", i)


def _record(obj: object, location: str, index: int) -> SourceRecord | InvalidRecord:
    if not isinstance(obj, dict):
        return InvalidRecord(f"{location}: expected an object with 'question' and 'answer'")
    missing = [k for k in ("question", "answer") if k not in obj]
    if missing:
        return InvalidRecord(f"{location}: missing {' and '.join(repr(k) for k in missing)}")
    return SourceRecord(obj["question"], obj["answer"], location, index)


def read_hub_split(split: str, local_dataset_path: str | None) -> Iterator[SourceRecord]:
    """`openai/gsm8k` ("main") from the hub, or from a local copy of that hub dataset."""
    import datasets

    source = local_dataset_path or HUB_DATASET
    try:
        dataset = datasets.load_dataset(source, HUB_CONFIG, split=split)
    except Exception as err:
        raise SourceError(
            f"could not load {source!r} ({HUB_CONFIG}) split {split!r}: {err}. Without hub access, pass "
            "--input_dir DIR holding GSM8K's train.jsonl/test.jsonl, or --local_dataset_path to a saved copy."
        ) from None
    for i, obj in enumerate(dataset):
        yield _record(obj, f"{source}[{split}] row {i}", i)
