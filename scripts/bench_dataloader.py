"""Benchmark: what loading GSM8K costs the trainer with and without DataLoader worker processes.

The program is `recipes.harness.bench.dataloader` (`--help` prints its usage); this file is its command."""

import sys

from recipes.harness.bench.dataloader import main

if __name__ == "__main__":
    sys.exit(main())
