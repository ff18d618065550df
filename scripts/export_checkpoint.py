"""Export a verl FSDP checkpoint to a Hugging Face model folder, and record beside it where it came from.

The program is `recipes.export` (`--help` prints its usage); this file is its command."""

import sys

from recipes.export.__main__ import main

if __name__ == "__main__":
    sys.exit(main())
