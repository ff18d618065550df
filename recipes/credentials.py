"""W&B credentials, looked up the way wandb and weave look them up: WANDB_API_KEY, else the netrc entry for the
host of the W&B in use (`wandb login` writes it; a self-hosted W&B has its own host, port included, where weave
reads it). One home: the preflight, the tracing guard, the trace relay, publish_evals and the Ray job use it."""

from __future__ import annotations

import configparser
import netrc
import os
from pathlib import Path
from urllib.parse import urlparse

DEFAULT_BASE_URL = "https://api.wandb.ai"


def wandb_base_url(environ: dict[str, str] | None = None) -> str:
    """The W&B weave and wandb talk to: WANDB_BASE_URL, else base_url in wandb's settings file."""
    environ = os.environ if environ is None else environ
    if environ.get("WANDB_BASE_URL"):
        return environ["WANDB_BASE_URL"].rstrip("/")
    home = Path(environ.get("HOME", str(Path.home())))
    settings = configparser.ConfigParser()
    config_dir = environ.get("WANDB_CONFIG_DIR") or home / ".config" / "wandb"
    try:
        settings.read([Path(config_dir) / "settings", Path.cwd() / "wandb" / "settings"])
    except configparser.Error:
        return DEFAULT_BASE_URL
    return settings.get("default", "base_url", fallback=DEFAULT_BASE_URL).rstrip("/")


def wandb_host(environ: dict[str, str] | None = None, base_url: str | None = None) -> str:
    """host[:port] of the W&B in use: the netrc machine name `wandb login` writes."""
    return urlparse(base_url or wandb_base_url(environ)).netloc or "api.wandb.ai"


def wandb_api_key(environ: dict[str, str] | None = None, base_url: str | None = None) -> str | None:
    """The key wandb would use for `base_url` (default: the W&B in use), or None."""
    environ = os.environ if environ is None else environ
    if environ.get("WANDB_API_KEY"):
        return environ["WANDB_API_KEY"]
    host = wandb_host(environ, base_url)
    home = Path(environ.get("HOME", str(Path.home())))
    for path in filter(None, (environ.get("NETRC"), home / ".netrc", home / "_netrc")):
        try:
            entry = netrc.netrc(str(path)).authenticators(host)
        except (OSError, netrc.NetrcParseError):
            continue
        if entry and entry[2]:
            return entry[2]
    return None


def has_wandb_credentials(environ: dict[str, str] | None = None) -> bool:
    """Whether weave / wandb can authenticate: an API key, or a W&B identity token file."""
    environ = os.environ if environ is None else environ
    return bool(wandb_api_key(environ) or environ.get("WANDB_IDENTITY_TOKEN_FILE"))
