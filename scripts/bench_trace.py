"""Benchmark: what Weave tracing costs the agent loop's thread, per traced call.

The program is `recipes.harness.bench.trace` (`--help` prints its usage); this file is its command."""

import sys

from recipes.harness.bench.trace import main

if __name__ == "__main__":
    sys.exit(main())
