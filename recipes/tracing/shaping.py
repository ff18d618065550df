"""What a Weave trace of a rollout holds: text, not token ids, and a root worth opening.

Every verl trace op (agent-loop run, each generate turn, each tool-call parse, each tool execute) goes
through `RolloutTraceConfig.get_client().create_call(...)` / `.finish_call(...)`. weave 0.54 walks every
element of lists in those inputs and outputs in the agent loop's thread (~60 µs per token id), and token
ids are most of what verl logs. `TextOnlyTracer` wraps the client once per worker process and keeps the
text (token2text's decoded prompt/response, messages, tool arguments and results) while replacing token-id
lists and verl's AgentData object with short placeholders. It also names each trajectory's root call after
its GRPO group so the group's rollouts sort together in the Weave UI, puts the recipe loop's summary (reward
first, then the conversation as chat messages) at the top of the root's output, and logs the conversation once
more under the root as a chat-completion call, which the Weave UI shows in its Chat tab. The root of a traced
training rollout is held until its step's rewards are in, then finished with its group's figures
(recipes/tracing/groups.py).
"""

from __future__ import annotations

import contextvars
import logging
from typing import Any

from pydantic import BaseModel

from recipes.trace_relay.sender import post_encoded_batches
from recipes.tracing.groups import GroupBook

logger = logging.getLogger(__name__)

# Fields holding token ids (or per-token values) in verl's traced inputs and outputs.
TOKEN_FIELDS = frozenset({
    "prompt_ids", "response_ids", "token_ids", "response_mask", "response_logprobs", "log_probs",
    "routed_experts", "input_ids", "attention_mask", "position_ids", "teacher_ids", "teacher_logprobs",
    "mm_processor_output", "multi_modal_data",
})
_LONG_NUMBER_LIST = 16  # any other all-number list longer than this is treated as token data too
TOOL_SCHEMAS_FIELD = "tools"  # the tool schemas verl passes each tool-call parse (extract_tool_calls)
ROOT_OP_SUFFIX = "AgentLoop.run"
CHAT_OP = "trajectory_chat"  # one per traced trajectory, under its root: the conversation in the UI's chat shape

# What the recipe loop wants shown first in its trace root (reward, correct, ...). Set inside the traced
# `run`; verl's rollout_trace_op awaits `run` directly, so the wrapper shares the context and reads it when
# it finishes the root call. Kept out of the loop's output: verl turns output fields into batch columns,
# which must be the same whether or not a worker traces.
ROLLOUT_SUMMARY: contextvars.ContextVar[dict | None] = contextvars.ContextVar("rollout_summary", default=None)


def sanitize(value: Any, depth: int = 0) -> Any:
    """A JSON-friendly copy with token data replaced by `<N token ids>` placeholders; text kept. Fields that hold
    nothing (None, {}, []) are left out and the tool schemas a parse is handed are named, not copied: weave walks
    every value of a call several times (`_save_nested_objects`, `map_to_refs`, serialization, redaction), about
    6 us each on Python 3.12 and 50 us on 3.11 (its Protocol isinstance in weave/trace/op.py is_op), so a value
    nobody reads still costs the agent loop (scripts/bench_rollout.py)."""
    if depth > 12:
        return "<nested too deep>"
    if isinstance(value, BaseModel):
        value = value.model_dump()
    if isinstance(value, dict):
        return {str(k): (_placeholder(v) if k in TOKEN_FIELDS else _tool_names(v) if k == TOOL_SCHEMAS_FIELD
                         else sanitize(v, depth + 1)) for k, v in value.items() if not _empty(v)}
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


def _empty(value: Any) -> bool:
    return value is None or (isinstance(value, (dict, list, tuple)) and not value)


def _tool_names(schemas: Any) -> Any:
    """["calculator", ...] for a list of OpenAI tool schemas (the same every turn); anything else as sanitize does."""
    if isinstance(schemas, (list, tuple)):
        names = [getattr(getattr(s, "function", None), "name", None) if not isinstance(s, dict)
                 else (s.get("function") or {}).get("name") for s in schemas]
        if all(isinstance(n, str) for n in names):
            return names
    return sanitize(schemas, 1)


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
        self.tokenizer = None  # set by install_text_only_tracer: each generate call's new text, decoded here
        skip_plain_values(client)
        # trajectory roots not finished yet, by object id (a call's op_name may still be a pending publish)
        self._open_roots: set[int] = set()
        self.groups = GroupBook()  # roots of traced GRPO groups, held until their step's figures are known

    def create_call(self, op: str, inputs: dict, attributes: dict | None = None, **kwargs) -> Any:
        attributes = dict(attributes or {})
        is_root = str(op).endswith(ROOT_OP_SUFFIX)
        if is_root and "sample_index" in attributes:
            # one GRPO group = one prompt at one step: filter on `group` to see its n rollouts side by side
            phase = "val" if attributes.get("validate") else "train"
            attributes["group"] = f"{phase}/step{attributes.get('step')}/prompt{attributes.get('sample_index')}"
            kwargs.setdefault("display_name", group_display_name(attributes))
        call = self.client.create_call(op=op, inputs=sanitize(inputs), attributes=attributes, **kwargs)
        if is_root:
            self._open_roots.add(id(call))
        return call

    def finish_call(self, call: Any, output: Any = None, exception: BaseException | None = None, **kwargs) -> Any:
        clean = sanitize(output)
        token_ids = getattr(output, "token_ids", None)  # a generate call's TokenOutput: what the model wrote
        if self.tokenizer is not None and isinstance(clean, dict) and isinstance(token_ids, list):
            clean["response_text"] = self.tokenizer.decode(token_ids)
        if id(call) in self._open_roots:
            self._open_roots.discard(id(call))
            summary = ROLLOUT_SUMMARY.get()
            ROLLOUT_SUMMARY.set(None)  # one root per summary
            if summary and isinstance(clean, dict):  # the recipe loop's summary goes first in the root's output
                clean = {**summary, **{k: v for k, v in clean.items() if k not in summary}}
                self._log_chat(call, summary.get("messages"))
            if exception is None and self.groups.hold(call, clean, kwargs):
                return None  # finished by the worker once the step's rewards are in (groups.close_step)
        return self.client.finish_call(call, output=clean, exception=exception, **kwargs)

    def _log_chat(self, root: Any, messages: list[dict] | None) -> None:
        """The trajectory once more as one chat-completion call under its root, for the Weave UI's Chat tab.

        The UI shows a call as a chat when its inputs hold OpenAI-style `messages` and its output `choices`
        (weave-js ChatView: isTraceCallChatFormatOpenAI / isMessage). The root's inputs are verl's, sent when
        the trajectory starts, so this call, made when it ends, holds the conversation: the messages before
        the model's last turn as inputs, that turn as choices[0]."""
        if not messages:
            return
        try:
            answered = messages[-1]["role"] == "assistant"
            request, last = (messages[:-1], messages[-1]) if answered else (messages, None)
            # the root's attributes (step, sample_index, rollout_n, group, ...): weave gives a call made here none
            attributes = {k: v for k, v in (getattr(root, "attributes", None) or {}).items() if k != "weave"}
            chat = self.client.create_call(op=CHAT_OP, inputs={"messages": request}, parent=root,
                                           attributes=attributes, display_name="conversation", use_stack=False)
            choices = [{"index": 0, "message": last, "finish_reason": "stop"}] if last else []
            self.client.finish_call(chat, output={"choices": choices})
        except Exception as err:  # a trace must never fail a rollout
            logger.warning("Weave: the conversation call was not logged: %s: %s", type(err).__name__, err)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)


_PLAIN = (str, int, float, bool, type(None))


def skip_plain_values(client: Any) -> None:
    """Make the client's search for weave objects in a call's inputs and output (`_save_nested_objects`, run on
    every value of every call) step over plain JSON values, which are all a sanitized payload holds: it only
    publishes weave Objects, Ops and Tables, and on Python 3.11 it asks each value `isinstance(value, Op)` of a
    runtime Protocol, ~25 us (weave/trace/op.py is_op). Anything else still goes through weave's own code."""
    original = getattr(client, "_save_nested_objects", None)
    if original is None or getattr(original, "_recipe_skips_plain", False):
        return

    def save_nested_objects(obj: Any, name: str | None = None) -> Any:
        kind = type(obj)
        if kind in _PLAIN:
            return None
        if kind is dict:
            for value in obj.values():
                save_nested_objects(value)
            return None
        if kind is list:
            for value in obj:
                save_nested_objects(value)
            return None
        return original(obj, name)

    save_nested_objects._recipe_skips_plain = True
    client._save_nested_objects = save_nested_objects


def install_text_only_tracer(tokenizer: Any = None) -> bool:
    """Wrap verl's weave client in this process (idempotent). True when tracing to weave is on.

    With `trace.token2text` on and the agent loop's tokenizer given, the tracer decodes the text itself, of each
    generate call's response only: verl's token2text would decode the whole context again at every turn and every
    trajectory's root (in the loop's executor), the largest part of a trace's bytes, while the trajectory's
    conversation is already on its root and its chat call (scripts/bench_rollout.py measures what a trace costs)."""
    from verl.utils.rollout_trace import RolloutTraceConfig

    config = RolloutTraceConfig.get_instance()
    if config.backend != "weave" or config.client is None:
        return False
    if not isinstance(config.client, TextOnlyTracer):
        config.client = TextOnlyTracer(config.client)
        post_encoded_batches()  # weave's sender: its batches' JSON posted as encoded, not parsed and walked again
    if tokenizer is not None and config.token2text:
        config.client.tokenizer, config.token2text = tokenizer, False
    return True


def tracing_this_call() -> bool:
    """Whether the code running now is inside a traced sample (verl's per-sample sampling decision)."""
    from verl.utils.rollout_trace import RolloutTraceConfig, _trace_enabled

    return RolloutTraceConfig.get_backend() is not None and _trace_enabled.get()
