"""`python -m recipes.trace_relay serve` in its own process, as the launcher runs it (under its supervisor)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path


class RelayProcess:
    """The supervised relay; stop() sends SIGTERM (drain, then exit) and returns what it printed."""

    def __init__(self, spool: Path, *args: str, **env: str) -> None:
        self.spool = spool
        url_file = spool.parent / f"{spool.name}.url"
        clean = {k: v for k, v in os.environ.items() if not k.startswith(("WANDB", "WF_"))}
        self.process = subprocess.Popen([sys.executable, "-m", "recipes.trace_relay", "serve", "--spool", str(spool),
                                         "--url-file", str(url_file), *args], env={**clean, **env},
                                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        deadline = time.monotonic() + 60
        while not url_file.exists():
            assert self.process.poll() is None, self.process.communicate()[0]
            assert time.monotonic() < deadline, "the relay wrote no URL within 60 s"
            time.sleep(0.1)
        self.url = url_file.read_text().strip()
        self.output = None

    @property
    def serving_pid(self) -> int:
        """The process that serves right now (it holds the spool's lock): the relay, not its supervisor."""
        return int((self.spool / "lock").read_text().split()[1])

    def stop(self) -> str:
        if self.output is None:
            self.process.send_signal(signal.SIGTERM)
            self.output = self.process.communicate(timeout=120)[0]
        return self.output
