"""W&B credentials, looked up the way wandb and weave look them up: WANDB_API_KEY, else the netrc entry for
the host of WANDB_BASE_URL (`wandb login` writes it; a self-hosted W&B uses its own host, not api.wandb.ai)."""

from __future__ import annotations

import netrc
import os
from pathlib import Path
from urllib.parse import urlparse

DEFAULT_BASE_URL = "https://api.wandb.ai"


def wandb_host(environ: dict[str, str] | None = None) -> str:
    environ = os.environ if environ is None else environ
    return urlparse(environ.get("WANDB_BASE_URL") or DEFAULT_BASE_URL).hostname or "api.wandb.ai"


def wandb_api_key(environ: dict[str, str] | None = None) -> str | None:
    """The key wandb would use, or None."""
    environ = os.environ if environ is None else environ
    if environ.get("WANDB_API_KEY"):
        return environ["WANDB_API_KEY"]
    path = Path(environ.get("NETRC") or Path(environ.get("HOME", str(Path.home()))) / ".netrc")
    try:
        entry = netrc.netrc(str(path)).authenticators(wandb_host(environ))
    except (OSError, netrc.NetrcParseError):
        return None
    return entry[2] if entry and entry[2] else None
