"""GSM8K -> train.parquet / test.parquet for verl's multi-turn tool agent loop.

    python data_prep/gsm8k.py                                  # openai/gsm8k from the hub -> ~/data/gsm8k
    python data_prep/gsm8k.py --input_dir DIR                  # GSM8K's original train/test.jsonl, offline
    python data_prep/gsm8k.py --tool_set calc_gsm8k_reward     # rows for the original recipe's tool
    python data_prep/gsm8k.py --fallback_sample --train_size 6 # the hub, else the bundled sample (the smokes)

Run it with the project's env (`.venv/bin/python` or `.venv-gpu/bin/python`, or either activated). Flags follow
verl's examples/data_preprocess/gsm8k*.py (--local_save_dir, its older alias --local_dir, --hdfs_dir,
--local_dataset_path). Every split is read and checked before anything is written, and each file is replaced
atomically, so a bad input never leaves half-written or mismatched parquet behind.

GSM8K as a dataset the reward scores (recipes/gsm8k/datasets.py): its rows' data_source and its answer checker, DATASET.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

if not __package__:  # run as a file from a checkout, not installed: the repo's own packages from its root
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

try:
    from data_prep.gsm8k_rows import DATA_SOURCE, InvalidRecord, build_row
    from data_prep.parquet_io import rows_to_table, write_parquet_atomic
    from data_prep.sources import (
        SAMPLE_DIR,
        SAMPLE_NAME,
        SourceError,
        find_split_file,
        hub_unreachable,
        read_hub_split,
        read_split_file,
    )
    from recipes.constants import HUB_DATASET, SPLITS
    from recipes.gsm8k.answers import answers_match, extract_answer
    from recipes.gsm8k.datasets import Dataset
    from recipes.gsm8k.tool_sets import DEFAULT_TOOL_SET, TOOL_SETS, ToolSet, get_tool_set
except ModuleNotFoundError as err:
    if __name__ != "__main__":
        raise
    sys.exit(f"[data_prep] error: {sys.executable} has no {err.name!r}: run this with the project's env "
             "(.venv/bin/python from scripts/setup_cpu_env.sh, .venv-gpu/bin/python from scripts/install_gpu_env.sh)")

DEFAULT_SAVE_DIR = "~/data/gsm8k"


def check_answer(model_text: str, ground_truth: str, method: str) -> tuple[str | None, bool]:
    """GSM8K's answer: strict, the number after the last `####`; flexible, the last number; equal by value."""
    answer = extract_answer(model_text, method)
    return answer, answers_match(answer, ground_truth)


DATASET = Dataset(data_source=DATA_SOURCE, check_answer=check_answer)


def log(msg: str) -> None:
    print(f"[data_prep] {msg}", flush=True)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--local_save_dir", default=DEFAULT_SAVE_DIR,
                   help="where train/test.parquet are written (default: %(default)s)")
    p.add_argument("--local_dir", default=None, help="deprecated alias of --local_save_dir (verl's older name)")
    p.add_argument("--hdfs_dir", default=None, help="also copy the output folder to this HDFS path")
    p.add_argument("--local_dataset_path", default=None, help="a local copy of the openai/gsm8k hub dataset")
    p.add_argument("--input_dir", default=None, help="GSM8K's original {train,test}.jsonl (or .parquet) files")
    p.add_argument("--tool_set", default=DEFAULT_TOOL_SET, choices=sorted(TOOL_SETS),
                   help="tools the rows offer: " + "; ".join(f"{t.name}: {t.description}" for t in TOOL_SETS.values()))
    p.add_argument("--train_size", type=int, default=None, help="keep the first N train rows")
    p.add_argument("--test_size", type=int, default=None, help="keep the first N test rows")
    p.add_argument("--skip_invalid", action="store_true", help="skip bad rows (and report them) instead of failing")
    p.add_argument("--fallback_sample", action="store_true",
                   help=f"with neither --input_dir nor --local_dataset_path: if the hub cannot be reached, read "
                        f"{SAMPLE_NAME}, and say so (enough rows for a smoke test, not for training)")
    args = p.parse_args(argv)
    if args.input_dir and args.local_dataset_path:
        p.error("--input_dir and --local_dataset_path are two different sources; pass one")
    for name in ("train_size", "test_size"):
        if getattr(args, name) is not None and getattr(args, name) <= 0:
            p.error(f"--{name} must be a positive number of rows")
    return args


def collect_split(records, split: str, tool_set: ToolSet, size: int | None, skip_invalid: bool) -> list[dict]:
    rows, skipped = [], []
    for record in records:
        if size is not None and len(rows) >= size:
            break
        try:
            if isinstance(record, InvalidRecord):
                raise record
            rows.append(build_row(record, split, tool_set))
        except InvalidRecord as err:
            if not skip_invalid:
                raise
            skipped.append(str(err))
    if skipped:
        log(f"{split}: skipped {len(skipped)} invalid rows (--skip_invalid); first: {skipped[0]}")
    if not rows:
        raise SourceError(f"{split}: no valid rows")
    return rows


def read_tables(args: argparse.Namespace, tool_set: ToolSet, input_dir: str | None) -> dict:
    """Every split from one source (input_dir, else the hub or args.local_dataset_path), checked, as tables."""
    sizes = {"train": args.train_size, "test": args.test_size}
    tables = {}
    for split in SPLITS:
        start = time.perf_counter()
        if input_dir:
            path = find_split_file(Path(input_dir).expanduser(), split)
            records, origin = read_split_file(path), str(path)
        else:
            records, origin = read_hub_split(split, args.local_dataset_path), args.local_dataset_path or "the hub"
        rows = collect_split(records, split, tool_set, sizes[split], args.skip_invalid)
        tables[split] = rows_to_table(rows)
        log(f"{split}: {len(rows)} rows from {origin} ({time.perf_counter() - start:.1f} s)")
    return tables


def prepare(args: argparse.Namespace) -> dict[str, Path]:
    tool_set = get_tool_set(args.tool_set)
    out_dir = Path(args.local_dir or args.local_save_dir).expanduser()
    input_dir, source = args.input_dir, args.input_dir or args.local_dataset_path or f"the hub ({HUB_DATASET})"
    fallback = args.fallback_sample and not (args.input_dir or args.local_dataset_path)
    unreachable = hub_unreachable() if fallback else None
    if unreachable:
        log(f"the hub cannot be reached ({unreachable}): using {SAMPLE_NAME}")
        input_dir, source = str(SAMPLE_DIR), SAMPLE_NAME
    try:
        tables = read_tables(args, tool_set, input_dir)
    except SourceError as err:
        if not fallback or input_dir:
            raise
        log(f"the hub did not serve GSM8K ({str(err).split('. Without', 1)[0]}): using {SAMPLE_NAME}")
        input_dir, source = str(SAMPLE_DIR), SAMPLE_NAME
        tables = read_tables(args, tool_set, input_dir)

    written = {}
    for split, table in tables.items():  # only now, with every split valid, touch the output folder
        path = out_dir / f"{split}.parquet"
        write_parquet_atomic(table, path)
        written[split] = path
        log(f"wrote {path} ({table.num_rows} rows, tool set {tool_set.name!r})")

    if args.hdfs_dir:
        from verl.utils.hdfs_io import copy, makedirs

        makedirs(args.hdfs_dir)
        copy(src=str(out_dir), dst=args.hdfs_dir)
        log(f"copied {out_dir} to {args.hdfs_dir}")
    log(f"source: {source}")
    return written


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.local_dir:
        log("--local_dir is deprecated; use --local_save_dir")
    try:
        prepare(args)
    except (SourceError, InvalidRecord, OSError) as err:
        print(f"[data_prep] error: {err}", file=sys.stderr)
        if isinstance(err, InvalidRecord):
            print("[data_prep] nothing was written; fix the row or pass --skip_invalid", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
