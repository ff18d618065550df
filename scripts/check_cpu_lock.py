"""Check: the CPU env's lock (requirements/test.txt) is CPU-only, fully pinned and hashed; --resolve proves it
with pip against the public indexes, pip's own configuration ignored.

The program is `recipes.harness.cpu_lock` (`--help` prints its usage); this file is its command."""

import sys

from recipes.harness.cpu_lock import main

if __name__ == "__main__":
    sys.exit(main())
