"""The launcher says, in one line, when it submits to a Ray cluster that runs without authentication (anyone who
reaches its ports runs code there and reads the job's secrets), and nothing when the cluster asks for Ray's token.
Two real one-node clusters on 127.0.0.1 (scripts/local_ray_cluster.py), one started with RAY_AUTH_MODE=disabled,
one with RAY_AUTH_MODE=token and a token of its own, as docs/multi-node.md starts a cluster."""

from __future__ import annotations

import io
import os
import secrets

import pytest

import local_ray_cluster as cluster
from recipes.launch import ray_job

pytestmark = [pytest.mark.integration, pytest.mark.timeout(400)]


@pytest.mark.parametrize("mode", ["disabled", "token"])
def test_the_launcher_warns_before_it_submits_to_a_cluster_without_authentication(mode, tmp_path):
    auth = {"RAY_AUTH_MODE": mode}
    if mode == "token":
        token = tmp_path / "ray_auth_token"
        token.write_text(secrets.token_hex(32))
        token.chmod(0o600)
        auth["RAY_AUTH_TOKEN_PATH"] = str(token)
    state = cluster.start(tmp_path / "cluster", nodes=1, cpus=1, gpus=0, auth=auth)
    try:
        out = io.StringIO()
        warned = ray_job.warn_if_open(state["dashboard"], out)
        assert ray_job.cluster_auth_mode(state["dashboard"]) == mode
    finally:
        cluster.stop(tmp_path / "cluster")
    lines = out.getvalue().splitlines()
    if mode == "disabled":
        assert warned and len(lines) == 1 and "without authentication" in lines[0] and "RAY_AUTH_MODE=token" in lines[0]
    else:
        assert not warned and lines == []
    assert ray_job.cluster_auth_mode("http://127.0.0.1:9") is None  # nothing there: no claim either way
    assert "RAY_AUTH_TOKEN_PATH" not in os.environ
