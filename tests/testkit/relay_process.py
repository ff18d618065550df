"""`python -m recipes.trace_relay serve` in its own process, as the launcher runs it (under its supervisor)."""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path

from recipes.trace_relay.names import TRACE_RELAY_ENV, TRACE_RELAY_TOKEN_ENV


class RelayProcess:
    """The supervised relay, with a token of its own as a launch gives one (`token`, `client_env`: what a client
    needs); stop() sends SIGTERM (drain, then exit) and returns what it printed. `preexec_fn` runs in the relay's
    process before it starts (limits, umask)."""

    def __init__(self, spool: Path, *args: str, preexec_fn=None, **env: str) -> None:
        self.spool = spool
        self.token = secrets.token_urlsafe(32)
        url_file = spool.parent / f"{spool.name}.url"
        clean = {k: v for k, v in os.environ.items() if not k.startswith(("WANDB", "WF_"))}
        self.process = subprocess.Popen([sys.executable, "-m", "recipes.trace_relay", "serve", "--spool", str(spool),
                                         "--url-file", str(url_file), *args],
                                        env={**clean, TRACE_RELAY_TOKEN_ENV: self.token, **env},
                                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                        preexec_fn=preexec_fn)
        deadline = time.monotonic() + 60
        while not url_file.exists():
            assert self.process.poll() is None, self.process.communicate()[0]
            assert time.monotonic() < deadline, "the relay wrote no URL within 60 s"
            time.sleep(0.1)
        self.url = url_file.read_text().strip()
        self.output = None

    @property
    def client_env(self) -> dict[str, str]:
        """What a worker's environment holds to trace through this relay (as the launcher hands it down)."""
        return {TRACE_RELAY_ENV: self.url, TRACE_RELAY_TOKEN_ENV: self.token}

    @property
    def serving_pid(self) -> int:
        """The process that serves right now (it holds the spool's lock): the relay, not its supervisor."""
        return int((self.spool / "lock").read_text().split()[1])

    def stop(self) -> str:
        if self.output is None:
            self.process.send_signal(signal.SIGTERM)
            self.output = self.process.communicate(timeout=120)[0]
        return self.output
