"""Where GSM8K records come from: the original files (JSONL or parquet), the Hugging Face hub, or the small sample
of GSM8K's own rows that ships with the data prep."""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Iterator
from pathlib import Path

from data_prep.gsm8k_rows import InvalidRecord, SourceRecord
from recipes.constants import HUB_CONFIG, HUB_DATASET

# The first 32 train / 16 test rows of GSM8K's files, with GSM8K's MIT licence (its README says what they are for).
SAMPLE_DIR = Path(__file__).resolve().parent / "gsm8k_sample"
SAMPLE_NAME = "the bundled GSM8K sample (data_prep/gsm8k_sample: real openai/gsm8k rows, MIT licence)"
HUB_HOST = "huggingface.co"


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


def hub_unreachable(timeout: float = 5.0) -> str | None:
    """Why the hub cannot be reached now, or None. Offline mode is left to `datasets` (a cached copy may serve);
    otherwise one connection attempt, instead of the hub client's retries (tens of seconds) when there is no route."""
    if any(os.environ.get(name, "0") not in ("", "0") for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")):
        return None
    try:
        socket.create_connection((HUB_HOST, 443), timeout=timeout).close()
    except OSError as err:
        return f"{HUB_HOST}: {err.strerror or err}"
    return None
