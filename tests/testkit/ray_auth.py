"""A test process that talks to a token-auth Ray cluster of the suite's own (scripts/local_ray_cluster.py): the
cluster's auth settings in this process's environment, and Ray's cached view of them read again (Ray reads them once
per process; a test process may have used Ray before with other settings)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from unittest import mock


def refresh() -> None:
    from ray._raylet import AuthenticationTokenLoader, Config

    Config.initialize("")
    AuthenticationTokenLoader.instance().reset_cache()


@contextlib.contextmanager
def cluster_auth(env: dict[str, str]) -> Iterator[None]:
    """`env`: the cluster's `env` (local_ray_cluster.start), e.g. RAY_AUTH_MODE and RAY_AUTH_TOKEN_PATH."""
    with mock.patch.dict(os.environ, env):
        refresh()
        yield
    refresh()
