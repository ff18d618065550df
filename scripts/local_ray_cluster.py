"""A Ray cluster of several nodes on this one machine, for the multi-node path without a cluster.

The program is `recipes.harness.local_ray_cluster` (`--help` prints its usage); this file is its command."""

import sys

from recipes.harness.local_ray_cluster import main

if __name__ == "__main__":
    sys.exit(main())
