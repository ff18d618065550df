"""Benchmark: what verl's reward-loop workers would cost a run of the recipe, which starts none of them (the recipe's
agent loop scores every trajectory itself, so the config sets reward.num_workers: 0).

Starts verl 0.9.1's own RewardLoopWorker actors the way its RewardLoopManager does (one Ray actor each, here on
this one node), with the recipe's 8xH100 config at verl's default reward.num_workers (8) and the offline Qwen2.5
tokenizer in place of the hub's, waits until each has loaded its tokenizer and the recipe's reward, and reads each
actor process's memory. On a GPU node they are the same processes (CPU only, no GPU memory).

    python scripts/bench_reward_workers.py [--workers 8]
    python scripts/bench_reward_workers.py --quick    # one worker: that it runs (`-m bench`), no figure

Last line: `RESULT reward_workers=<n> reward_workers_rss_mb=<sum of RSS> reward_workers_pss_mb=<sum of PSS>
reward_workers_start_s=<seconds until all were ready>`.
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("WANDB_ERROR_REPORTING", "false")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workers", type=int, default=8, help="verl's default reward.num_workers")
    p.add_argument("--quick", action="store_true", help="--workers 1")
    args = p.parse_args(argv)
    if args.quick:
        args.workers = 1

    import psutil
    import ray
    from verl.experimental.reward_loop.reward_loop import RewardLoopWorker

    from harness.agent_loop_inprocess import compose_trainer_config
    from harness.qwen_tokenizer import build_qwen25_tokenizer_dir, default_cache_dir

    tokenizer_dir = build_qwen25_tokenizer_dir(default_cache_dir() / "bench_reward_workers")
    config = compose_trainer_config("calculator", (f"reward.num_workers={args.workers}",
                                                   f"actor_rollout_ref.model.path={tokenizer_dir}"))
    ray.init(num_cpus=args.workers, include_dashboard=False, log_to_driver=False)
    try:
        start = time.perf_counter()
        actors = [ray.remote(RewardLoopWorker).options(name=f"reward_loop_worker_{i}").remote(config, None)
                  for i in range(args.workers)]
        pids = ray.get([a.__ray_call__.remote(lambda self: os.getpid()) for a in actors])  # each one's __init__ done
        start_s = time.perf_counter() - start
        memory = [psutil.Process(pid).memory_full_info() for pid in pids]
    finally:
        ray.shutdown()
    rss_mb = sum(m.rss for m in memory) / 2**20
    pss_mb = sum(m.pss for m in memory) / 2**20
    for pid, m in zip(pids, memory, strict=True):
        print(f"[bench_reward_workers] pid {pid}: RSS {m.rss / 2**20:.0f} MB, PSS {m.pss / 2**20:.0f} MB, "
              f"USS {m.uss / 2**20:.0f} MB")
    print(f"RESULT reward_workers={args.workers} reward_workers_rss_mb={rss_mb:.0f} reward_workers_pss_mb={pss_mb:.0f} "
          f"reward_workers_start_s={start_s:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
