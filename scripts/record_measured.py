"""Record measured figures in docs/measured.md, the one page that holds them (the other pages link to its rows).

The program is `recipes.harness.bench.measured` (`--help` prints its usage); this file is its command."""

import sys

from recipes.harness.bench.measured import main

if __name__ == "__main__":
    sys.exit(main())
