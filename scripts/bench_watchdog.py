"""Benchmark: what the launcher's progress watchdog costs in the CPU smoke (CPU, memory), and that it imports no torch.

The program is `recipes.harness.bench.watchdog`; this file is its command:

    python scripts/bench_watchdog.py | python scripts/record_measured.py
"""

import sys

from recipes.harness.bench.watchdog import main

if __name__ == "__main__":
    sys.exit(main())
