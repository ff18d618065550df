"""Publish each validation dump of a run to Weave as an Evaluation (once; re-running sends nothing new).

The program is `recipes.results.publish` (`--help` prints its usage); this file is its command."""

import sys

from recipes.results.publish import main

if __name__ == "__main__":
    sys.exit(main())
