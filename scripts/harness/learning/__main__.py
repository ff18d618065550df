"""`python -m harness.learning [hydra overrides for GRPO]`: the learning check's pipeline
(scripts/harness/learning/pipeline.py), with its knobs in the environment as scripts/learn_cpu.sh sets them."""

import sys

from harness.learning.pipeline import main

if __name__ == "__main__":
    sys.exit(main())
