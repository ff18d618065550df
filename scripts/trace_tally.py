"""Count a run's traced trajectories against what W&B received: the multi-node smoke's last line.

The program is `recipes.harness.trace_tally` (`--help` prints its usage); this file is its command."""

import sys

from recipes.harness.trace_tally import main

if __name__ == "__main__":
    sys.exit(main())
