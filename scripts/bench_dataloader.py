"""Benchmark: what loading GSM8K costs the trainer with and without DataLoader worker processes
(data.dataloader_num_workers: the recipe sets 0, verl's default is 8).

Builds verl 0.9.1's own RLHFDataset from the prepared GSM8K parquet with the recipe's 8xH100 config (256 prompts a
step, overlong prompts filtered) and the offline Qwen2.5 tokenizer, and its StatefulDataLoader exactly as verl's
trainer does (ray_trainer.py: the sampler, collate_fn, drop_last), then times in this process:
- per training batch with no workers: the time a step waits for its prompts (with workers they are prefetched
  while the step runs, so a step on a GPU waits about 0);
- from a fresh iterator to its first batch, 0 and N workers: what every epoch start and every validation pays
  (verl makes a new iterator for each; N workers are N forked processes);
- a whole validation pass over the test split (verl loads it as one batch).

    python data_prep/gsm8k.py --local_save_dir /tmp/gsm8k_bench
    python scripts/bench_dataloader.py --data_dir /tmp/gsm8k_bench [--workers 8]
    python scripts/bench_dataloader.py --quick     # the bundled GSM8K sample, 8-prompt batches: checks the command

Last line: `RESULT dataloader_first_batch_ms_workers0=... dataloader_val_pass_ms_workers0=...
dataloader_batch_ms=<no workers, per 256-prompt batch> dataloader_first_batch_ms_workers<N>=...
dataloader_val_pass_ms_workers<N>=...`.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

os.environ.setdefault("WANDB_ERROR_REPORTING", "false")


def datasets(config, tokenizer):
    """verl's train and validation datasets for this config (overlong prompts filtered once, here)."""
    from verl.trainer.ppo.utils import create_rl_dataset

    data = config.data
    return (create_rl_dataset(data.train_files, data, tokenizer, None),
            create_rl_dataset(data.val_files, data, tokenizer, None, is_train=False))


def loaders(config, train, val, workers: int):
    """verl's train and validation loaders, as RayPPOTrainer._create_dataloader builds them."""
    from torchdata.stateful_dataloader import StatefulDataLoader
    from verl.trainer.ppo.utils import create_rl_sampler
    from verl.utils.dataset.rl_dataset import collate_fn

    data = config.data
    train_loader = StatefulDataLoader(dataset=train, batch_size=data.train_batch_size, num_workers=workers,
                                      drop_last=True, collate_fn=collate_fn, sampler=create_rl_sampler(data, train))
    val_loader = StatefulDataLoader(dataset=val, batch_size=data.val_batch_size or len(val), num_workers=workers,
                                    shuffle=False, drop_last=False, collate_fn=collate_fn)
    return train_loader, val_loader


def first_batch_ms(loader) -> float:
    start = time.perf_counter()
    iterator = iter(loader)
    next(iterator)
    elapsed = (time.perf_counter() - start) * 1000
    del iterator  # its workers (if any) are shut down here, as when verl's loop ends
    return elapsed


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data_dir", type=Path, help="prepared parquet (python data_prep/gsm8k.py)")
    p.add_argument("--quick", action="store_true",
                   help="the bundled GSM8K sample (32 train rows) in batches of 8, 2 timed: seconds, no figures")
    p.add_argument("--workers", type=int, default=8, help="the worker count to compare with 0 (verl's default: 8)")
    p.add_argument("--batches", type=int, default=5, help="training batches timed with no workers")
    args = p.parse_args()
    if args.quick:
        return _quick(args)
    if args.data_dir is None:
        p.error("--data_dir is required (or --quick)")
    return measure(args.data_dir, args.workers, args.batches)


def _quick(args) -> int:
    import tempfile

    from data_prep import gsm8k
    from data_prep.sources import SAMPLE_DIR

    with tempfile.TemporaryDirectory(prefix="bench_dataloader_") as tmp:
        if gsm8k.main(["--input_dir", str(SAMPLE_DIR), "--local_save_dir", tmp]) != 0:
            raise RuntimeError("data prep of the bundled GSM8K sample failed")
        return measure(Path(tmp), args.workers, 2, ("data.train_batch_size=8",))


def measure(data_dir: Path, workers: int, batches: int, overrides: tuple[str, ...] = ()) -> int:
    from verl.utils import hf_tokenizer

    from harness.agent_loop_inprocess import compose_trainer_config
    from harness.qwen_tokenizer import build_qwen25_tokenizer_dir, default_cache_dir

    tokenizer_dir = build_qwen25_tokenizer_dir(default_cache_dir() / "bench_dataloader")
    config = compose_trainer_config("calculator", (
        f"actor_rollout_ref.model.path={tokenizer_dir}",
        f"data.train_files={data_dir / 'train.parquet'}", f"data.val_files={data_dir / 'test.parquet'}", *overrides))
    tokenizer = hf_tokenizer(str(tokenizer_dir))

    train_set, val_set = datasets(config, tokenizer)
    results = {}
    for n_workers in (0, workers):
        train, val = loaders(config, train_set, val_set, n_workers)
        first = results[f"dataloader_first_batch_ms_workers{n_workers}"] = first_batch_ms(train)
        val_pass = results[f"dataloader_val_pass_ms_workers{n_workers}"] = first_batch_ms(val)
        if n_workers == 0:
            iterator, times = iter(train), []
            for _ in range(batches):
                start = time.perf_counter()
                next(iterator)
                times.append((time.perf_counter() - start) * 1000)
            results["dataloader_batch_ms"] = statistics.median(times)
            print(f"[bench_dataloader] no workers: {batches} batches of {config.data.train_batch_size} prompts, "
                  f"ms each: {', '.join(f'{t:.0f}' for t in times)}")
        print(f"[bench_dataloader] {n_workers} workers: first batch {first:.0f} ms, validation pass "
              f"({len(val_set)} rows) {val_pass:.0f} ms")
    print("RESULT " + " ".join(f"{k}={v:.0f}" for k, v in results.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
