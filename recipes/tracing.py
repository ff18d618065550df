"""Weave traces that are worth opening and cheap to record.

Every verl trace op (agent-loop run, each generate turn, each tool-call parse, each tool execute) goes
through `RolloutTraceConfig.get_client().create_call(...)` / `.finish_call(...)`. weave 0.54 walks every
element of lists in those inputs and outputs in the agent loop's thread (~60 µs per token id), and token
ids are most of what verl logs. `TextOnlyTracer` wraps the client once per worker process and keeps the
text (token2text's decoded prompt/response, messages, tool arguments and results) while replacing token-id
lists and verl's AgentData object with short placeholders. It also names each trajectory's root call after
its GRPO group so the group's rollouts sort together in the Weave UI.

`guard_trace_init` makes a failed `weave.init` (no key, W&B unreachable) turn tracing off with one warning
instead of killing the agent-loop worker.
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path
from typing import Any

from pydantic import BaseModel

logger = logging.getLogger(__name__)

# Fields holding token ids (or per-token values) in verl's traced inputs and outputs.
TOKEN_FIELDS = frozenset({
    "prompt_ids", "response_ids", "token_ids", "response_mask", "response_logprobs", "log_probs",
    "routed_experts", "input_ids", "attention_mask", "position_ids", "teacher_ids", "teacher_logprobs",
    "mm_processor_output", "multi_modal_data",
})
_LONG_NUMBER_LIST = 16  # any other all-number list longer than this is treated as token data too
ROOT_OP_SUFFIX = "AgentLoop.run"


def sanitize(value: Any, depth: int = 0) -> Any:
    """A JSON-friendly copy with token data replaced by `<N token ids>` placeholders; text kept."""
    if depth > 12:
        return "<nested too deep>"
    if isinstance(value, BaseModel):
        value = value.model_dump()
    if isinstance(value, dict):
        return {str(k): (_placeholder(v) if k in TOKEN_FIELDS else sanitize(v, depth + 1)) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        if len(value) > _LONG_NUMBER_LIST and all(isinstance(v, (int, float)) for v in value):
            return _placeholder(value)
        return [sanitize(v, depth + 1) for v in value]
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    if type(value).__name__ == "AgentData":  # verl hands its whole trajectory state to every tool call
        return {"request_id": getattr(value, "request_id", None),
                "assistant_turns": getattr(value, "assistant_turns", None),
                "user_turns": getattr(value, "user_turns", None)}
    if hasattr(value, "shape"):  # numpy / torch
        return f"<array {tuple(value.shape)}>"
    return str(value)[:500]


def _placeholder(value: Any) -> Any:
    try:
        return f"<{len(value)} token ids>"
    except TypeError:
        return "<token data>"


def group_display_name(attributes: dict) -> str | None:
    if "sample_index" not in attributes:
        return None
    phase = "val" if attributes.get("validate") else "train"
    return (f"{phase} step {attributes.get('step')} · prompt {attributes.get('sample_index')} · "
            f"rollout {attributes.get('rollout_n')}")


class TextOnlyTracer:
    """Wraps a weave client: same create_call/finish_call, sanitized payloads, named GRPO groups."""

    def __init__(self, client: Any) -> None:
        self.client = client

    def create_call(self, op: str, inputs: dict, attributes: dict | None = None, **kwargs) -> Any:
        attributes = dict(attributes or {})
        if str(op).endswith(ROOT_OP_SUFFIX) and "sample_index" in attributes:
            # one GRPO group = one prompt at one step: filter on `group` to see its n rollouts side by side
            phase = "val" if attributes.get("validate") else "train"
            attributes["group"] = f"{phase}/step{attributes.get('step')}/prompt{attributes.get('sample_index')}"
            kwargs.setdefault("display_name", group_display_name(attributes))
        return self.client.create_call(op=op, inputs=sanitize(inputs), attributes=attributes, **kwargs)

    def finish_call(self, call: Any, output: Any = None, exception: BaseException | None = None, **kwargs) -> Any:
        clean = sanitize(output)
        if isinstance(clean, dict) and isinstance(clean.get("extra_fields"), dict):
            # the recipe loop's summary (reward, correct, tool calls...) goes first in the root's output
            summary = clean["extra_fields"].pop("rollout_summary", None)
            if summary:
                clean = {**summary, **{k: v for k, v in clean.items() if k not in summary}}
        return self.client.finish_call(call, output=clean, exception=exception, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)


def install_text_only_tracer() -> bool:
    """Wrap verl's weave client in this process (idempotent). True when tracing to weave is on."""
    from verl.utils.rollout_trace import RolloutTraceConfig

    config = RolloutTraceConfig.get_instance()
    if config.backend != "weave" or config.client is None:
        return False
    if not isinstance(config.client, TextOnlyTracer):
        config.client = TextOnlyTracer(config.client)
    return True


def tracing_this_call() -> bool:
    """Whether the code running now is inside a traced sample (verl's per-sample sampling decision)."""
    from verl.utils.rollout_trace import RolloutTraceConfig, _trace_enabled

    return RolloutTraceConfig.get_backend() is not None and _trace_enabled.get()


# ---- failure isolation ------------------------------------------------------------------------------

INIT_TIMEOUT_S = float(os.environ.get("GSM8K_RECIPE_TRACE_INIT_TIMEOUT", "120"))


def _has_wandb_credentials() -> bool:
    netrc = Path(os.environ.get("NETRC", Path.home() / ".netrc"))
    return bool(os.environ.get("WANDB_API_KEY")) or (netrc.is_file() and "api.wandb.ai" in netrc.read_text(errors="ignore"))


def guard_trace_init() -> None:
    """Make RolloutTraceConfig.init survive weave.init failing: tracing goes off, training goes on.

    verl calls RolloutTraceConfig.init inside AgentLoopWorker.__init__, right after loading the tool
    classes, so importing the `tools` package (which calls this) is the earliest hook in every worker.
    """
    from verl.utils.rollout_trace import RolloutTraceConfig

    original = RolloutTraceConfig.__dict__["init"].__func__
    if getattr(original, "_recipe_guarded", False):
        return

    def guarded_init(cls, project_name, experiment_name, backend, token2text=False, max_samples_per_step_per_worker=None):
        if backend == "weave" and not _weave_ready(project_name):
            backend = None
        return original(cls, project_name, experiment_name, backend, token2text, max_samples_per_step_per_worker)

    guarded_init._recipe_guarded = True
    RolloutTraceConfig.init = classmethod(guarded_init)


def _weave_ready(project_name: str) -> bool:
    """Run weave.init with a time limit; on any failure warn once and report tracing as unavailable."""
    try:
        from weave.trace.context import weave_client_context
    except ImportError:
        logger.warning("Weave tracing is OFF for this run: weave is not installed in this worker "
                       "(bash scripts/install_gpu_env.sh installs it), or set TRACE=off.")
        return False

    if weave_client_context.get_weave_client() is not None:  # already initialised in this process
        return True
    if not _has_wandb_credentials():
        logger.warning("Weave tracing is OFF for this run: no WANDB_API_KEY (or `wandb login`) in this worker. "
                       "Training continues; set the key to get traces, or TRACE=off to silence this.")
        return False
    outcome: dict[str, Any] = {}

    def attempt() -> None:
        try:
            import weave

            weave.init(project_name)
            outcome["ok"] = True
        except BaseException as err:  # weave raises transport errors, SystemExit on bad keys, ...
            outcome["error"] = err

    thread = threading.Thread(target=attempt, name="weave-init", daemon=True)
    thread.start()
    thread.join(INIT_TIMEOUT_S)
    if outcome.get("ok"):
        return True
    reason = f"{type(outcome['error']).__name__}: {outcome['error']}" if "error" in outcome else (
        f"no answer from W&B within {INIT_TIMEOUT_S:.0f} s")
    logger.warning("Weave tracing is OFF for this run: weave.init(%r) failed (%s). Training continues without "
                   "traces; check network access to W&B, or set TRACE=off.", project_name, reason)
    return False
