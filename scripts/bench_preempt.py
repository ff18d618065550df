"""Benchmark: a stop's time from the signal to the launcher's exit (a CPU run) and its projection for 8xH100.

The program is `recipes.harness.bench.preempt`; this file is its command:

    python scripts/bench_preempt.py | python scripts/record_measured.py
    python scripts/bench_preempt.py --projection-only | python scripts/record_measured.py
"""

import sys

from recipes.harness.bench.preempt import main

if __name__ == "__main__":
    sys.exit(main())
