"""Preflight for scripts/run_gsm8k_grpo.sh: everything that can be checked before a GPU is used.

The program is `recipes.launch.preflight_command` (`--help` prints its usage); this file is its command."""

import sys

from recipes.launch.preflight_command import main

if __name__ == "__main__":
    sys.exit(main())
