"""Benchmark: what verl's reward-loop workers would cost a run of the recipe, which starts none of them.

The program is `recipes.harness.bench.reward_workers` (`--help` prints its usage); this file is its command."""

import sys

from recipes.harness.bench.reward_workers import main

if __name__ == "__main__":
    sys.exit(main())
