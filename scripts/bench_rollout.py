"""Benchmark: a production rollout step of the recipe on CPU (verl's real agent-loop manager and workers).

The program is `recipes.harness.bench.rollout` (`--help` prints its usage); this file is its command."""

import sys

from recipes.harness.bench.rollout.__main__ import main

if __name__ == "__main__":
    sys.exit(main())
