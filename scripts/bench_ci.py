"""Benchmark: CI time, what `.ci/run` (= `bash scripts/run_tests.sh`) takes on a fresh clone of this repo's HEAD.

The program is `recipes.harness.bench.ci` (`--help` prints its usage); this file is its command."""

import sys

from recipes.harness.bench.ci import main

if __name__ == "__main__":
    sys.exit(main())
