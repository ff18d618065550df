"""Benchmark: full GSM8K data prep from local files, as a user runs it (a fresh process each time).

The program is `recipes.harness.bench.data_prep` (`--help` prints its usage); this file is its command."""

import sys

from recipes.harness.bench.data_prep import main

if __name__ == "__main__":
    sys.exit(main())
