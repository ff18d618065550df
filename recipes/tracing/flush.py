"""The per-step flush: what this process's weave client still holds, sent at the end of each rollout step."""

from __future__ import annotations

import asyncio
import logging
import os

logger = logging.getLogger(__name__)

FLUSH_TIMEOUT_S = float(os.environ.get("GSM8K_RECIPE_TRACE_FLUSH_TIMEOUT", "30"))


class TraceFlusher:
    """Flush this process's weave client off the event loop, waiting at most `timeout_s`.

    Ray async actors never run atexit, so calls still queued in weave when the worker is torn down are lost
    unless flushed. A flush that outlives the wait goes on in its thread; the next step waits for it instead
    of starting another."""

    def __init__(self, timeout_s: float = FLUSH_TIMEOUT_S) -> None:
        self.timeout_s = timeout_s
        self._running: asyncio.Future | None = None

    async def flush(self) -> bool:
        """True when weave's queue is empty (sent, or handed to the relay)."""
        from verl.utils.rollout_trace import RolloutTraceConfig

        client = RolloutTraceConfig.get_client()
        if RolloutTraceConfig.get_backend() != "weave" or client is None:
            return True
        if self._running is None or self._running.done():
            self._running = asyncio.ensure_future(asyncio.to_thread(client.flush))
        try:
            await asyncio.wait_for(asyncio.shield(self._running), self.timeout_s)
            return True
        except TimeoutError:
            logger.warning("Weave traces not flushed within %.0f s (W&B slow or unreachable); training goes on, "
                           "weave keeps sending in the background.", self.timeout_s)
        except Exception as err:  # a broken trace client must not fail a rollout step
            logger.warning("Weave flush failed: %s: %s", type(err).__name__, err)
        return False
