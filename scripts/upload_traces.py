"""Send Weave traces kept by the trace relay to W&B (after an outage, or from an air-gapped cluster).

    python scripts/upload_traces.py --spool outputs/<experiment>/trace_spool [--upstream https://api.wandb.ai]

Copy the spool directory to a machine that reaches W&B and run this there, with WANDB_API_KEY set (or `wandb
login`). It sends the records in the order they were made, creates the project if needed, resumes where it
stopped, and never sends a record twice once W&B confirmed it. Prints what was sent and what is left; exit
status 0 only when nothing is left.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from recipes.trace_relay.__main__ import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(["upload", *sys.argv[1:]], upload_help={"prog": "python scripts/upload_traces.py",
                                                          "description": __doc__}))
