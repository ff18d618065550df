"""verl's trace singleton pointed at a loopback W&B stand-in for one block of a test: the environment weave reads,
a fresh RolloutTraceConfig and no weave client left over from another test, on the way in and on the way out."""

from __future__ import annotations

import contextlib

import pytest

from harness.standins.weave_http_server import loopback_wandb


@contextlib.contextmanager
def traced_to_loopback_wandb():
    """Yields the running stand-in (its `url`, `entity`, `storage`)."""
    with pytest.MonkeyPatch.context() as env, loopback_wandb() as wandb:
        for name, value in wandb.env.items():
            env.setenv(name, value)
        _forget_tracing()
        try:
            yield wandb
        finally:
            _forget_tracing()


def _forget_tracing() -> None:
    from verl.utils.rollout_trace import RolloutTraceConfig
    from weave.trace.context import weave_client_context

    RolloutTraceConfig.reset()
    weave_client_context.set_weave_client_global(None)  # weave.init reuses a global client left by another test
