"""scripts/upload_traces.py --help says what the script does, how to run it, and what each flag is."""

import subprocess
import sys

from recipes.constants import REPO_ROOT


def test_help_describes_the_upload():
    proc = subprocess.run([sys.executable, str(REPO_ROOT / "scripts" / "upload_traces.py"), "--help"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    out = " ".join(proc.stdout.split())
    assert out.startswith("usage: python scripts/upload_traces.py")
    assert "Send Weave traces kept by the trace relay to W&B" in out
    assert "--spool SPOOL the relay's spool dir (OUTPUT_DIR/trace_spool)" in out
