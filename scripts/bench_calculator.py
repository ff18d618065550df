"""Benchmark: calculator latency per call, through the tool's `execute`.

The program is `recipes.harness.bench.calculator` (`--help` prints its usage); this file is its command."""

import sys

from recipes.harness.bench.calculator import main

if __name__ == "__main__":
    sys.exit(main())
