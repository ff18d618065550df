"""Break trace relays from outside, as an operator (or a check) would.

The program is `recipes.harness.relay_faults` (`--help` prints its usage); this file is its command."""

import sys

from recipes.harness.relay_faults import main

if __name__ == "__main__":
    sys.exit(main())
