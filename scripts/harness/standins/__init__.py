"""Stand-ins for what cannot run on a machine without a GPU server or W&B, so the benchmarks users run
(scripts/bench_*.py) measure the recipe's own code offline, and the tests run it: each module says what real
thing it replaces (an LLM server's client, W&B's trace server in memory, W&B over loopback HTTP). Nothing in a
training run imports them."""
