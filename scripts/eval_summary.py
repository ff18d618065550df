"""Summarize a verl validation dump as the run scored it (strict and flexible), tool use and pass@k.

The program is `recipes.results.summary` (`--help` prints its usage); this file is its command."""

import sys

from recipes.results.summary import main

if __name__ == "__main__":
    sys.exit(main())
