"""Offline report from verl's rollout dumps: PNG plots and a short markdown summary.

The program is `recipes.results.rollout_report` (`--help` prints its usage); this file is its command."""

import sys

from recipes.results.rollout_report import main

if __name__ == "__main__":
    sys.exit(main())
