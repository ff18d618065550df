"""Weave traces that are worth opening and cheap to record.

Every verl trace op (agent-loop run, each generate turn, each tool-call parse, each tool execute) goes
through `RolloutTraceConfig.get_client().create_call(...)` / `.finish_call(...)`. weave 0.54 walks every
element of lists in those inputs and outputs in the agent loop's thread (~60 µs per token id), and token
ids are most of what verl logs. `TextOnlyTracer` wraps the client once per worker process and keeps the
text (token2text's decoded prompt/response, messages, tool arguments and results) while replacing token-id
lists and verl's AgentData object with short placeholders. It also names each trajectory's root call after
its GRPO group so the group's rollouts sort together in the Weave UI, puts the recipe loop's summary (reward
first, then the conversation as chat messages) at the top of the root's output, and logs the conversation once
more under the root as a chat-completion call, which the Weave UI shows in its Chat tab.

`guard_trace_init` makes a failed `weave.init` (no key, W&B unreachable, a server that disables this weave)
turn tracing off with one warning instead of killing the agent-loop worker. `use_trace_relay` points this
process's weave at the node's trace relay (recipes/trace_relay) when the launcher runs one, and a
`TraceFlusher` sends what weave still holds, within a time limit, at the end of each rollout step.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import os
import threading
from typing import Any

from pydantic import BaseModel

from recipes.constants import RELAY_HEALTH_PATH, TRACE_RELAY_ENV  # TRACE_RELAY_ENV: the launcher's relay URL
from recipes.credentials import has_wandb_credentials
from recipes.weave_sender import post_encoded_batches

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


# ---- the node's trace relay --------------------------------------------------------------------------

# weave needs some key to start; the relay authenticates to W&B with its own, so this one never leaves the node
RELAY_CLIENT_KEY = "trace-relay-" + "0" * 28
RELAYED_RETRY_ATTEMPTS = "6"  # weave's WEAVE_RETRY_MAX_ATTEMPTS for a client of a relay, unless set


def use_trace_relay(config: Any = None) -> str | None:
    """If the launcher runs a trace relay for this process's node, point THIS process's weave at it (GraphQL and
    trace server) and return its URL. Only here: the wandb metrics logger in the trainer keeps talking to W&B.

    Where the relay is: on one node, the launcher hands its URL down in TRACE_RELAY_ENV; on a Ray cluster, the
    relay of this worker's node is found by name (recipes/trace_relay/on_ray.py) from the run the trainer
    `config` names. A worker whose relay does not answer traces straight to W&B, as without a relay: the
    per-step flush still sends what a step traced, but an outage longer than weave's retries loses calls."""
    url = (os.environ.get(TRACE_RELAY_ENV) or "").rstrip("/")
    if not url and config is not None:
        url = _node_relay_url(config) or ""
    if not url:
        return None
    if not _relay_answers(url):
        logger.warning("Trace relay %s does not answer from this process's node: tracing straight to W&B "
                       "instead (traces made while W&B is unreachable may be lost).", url)
        return None
    os.environ["WANDB_BASE_URL"] = url
    os.environ["WF_TRACE_SERVER_URL"] = url + "/traces"
    os.environ.setdefault("WANDB_API_KEY", RELAY_CLIENT_KEY)  # a netrc entry is for W&B's host, not the relay's
    os.environ["WANDB_ERROR_REPORTING"] = "false"  # Sentry would try to leave an air-gapped node
    os.environ["WEAVE_USE_SERVER_CACHE"] = "false"  # its cache is keyed without the server URL (facts doc)
    # weave gives a refused request ~10 s (3 attempts); a relay keeper that Ray starts again takes longer: ~30 s
    os.environ.setdefault("WEAVE_RETRY_MAX_ATTEMPTS", RELAYED_RETRY_ATTEMPTS)
    try:
        from weave.trace import init_message

        # weave.init asks PyPI for a newer weave (3 s timeout, DNS not bounded) and offers no switch
        init_message._print_version_check = lambda: None
        # "View Weave data at <relay URL>" would name a loopback port gone after the run; the launcher says
        # once where the traces are in W&B (recipes/trace_location.py)
        init_message.print_init_message = lambda *args, **kwargs: None
    except ImportError:
        pass
    return url


def quiet_call_links() -> None:
    """No per-call `weave: 🍩 <url>` lines from this process, unless the user asked for them.

    weave logs one link per root call (weave/trace/weave_client.py:262-264, from create_call or finish_call)
    unless WEAVE_PRINT_CALL_LINK is false: at the recipe's defaults that is one line per traced trajectory,
    hundreds per step, and through the relay each names a loopback port gone after the run. Each line shows
    twice: weave's logger has its own handler and still propagates to the root handler `import verl` adds.
    The environment variable is the only setting that holds here: weave.init keeps its settings in a
    ContextVar, and the recipe runs weave.init in a thread of its own, so they never reach the rollouts."""
    if not os.environ.get("WEAVE_PRINT_CALL_LINK"):  # weave reads an empty value as unset
        os.environ["WEAVE_PRINT_CALL_LINK"] = "false"


def _node_relay_url(config: Any) -> str | None:
    """This node's relay on a Ray cluster, if the launcher started relays there for this run."""
    try:
        import ray

        from recipes.trace_relay.on_ray import node_relay_url, run_key

        url = node_relay_url(run_key(config))
        if url:  # one line per worker in the run's log: which node it is on, whose relay it uses
            node = ray.get_runtime_context().get_node_id()
            print(f"[traces] agent-loop worker pid {os.getpid()} on node {node[:8]}: tracing through that node's "
                  f"relay {url}", flush=True)
        return url
    except Exception as err:  # never fail a worker over tracing
        logger.warning("Looking up this node's trace relay failed: %s: %s", type(err).__name__, err)
        return None


def _relay_answers(url: str, timeout_s: float = 5.0) -> bool:
    import json
    import urllib.request

    try:
        with urllib.request.urlopen(url + RELAY_HEALTH_PATH, timeout=timeout_s) as answer:
            return json.load(answer).get("trace_relay") is True
    except (OSError, ValueError, AttributeError):
        return False


# ---- per-step flush ----------------------------------------------------------------------------------

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
        except asyncio.TimeoutError:
            logger.warning("Weave traces not flushed within %.0f s (W&B slow or unreachable); training goes on, "
                           "weave keeps sending in the background.", self.timeout_s)
        except Exception as err:  # a broken trace client must not fail a rollout step
            logger.warning("Weave flush failed: %s: %s", type(err).__name__, err)
        return False


# ---- failure isolation ------------------------------------------------------------------------------

INIT_TIMEOUT_S = float(os.environ.get("GSM8K_RECIPE_TRACE_INIT_TIMEOUT", "120"))


def guard_trace_init() -> None:
    """Make RolloutTraceConfig.init survive weave.init failing (tracing goes off, training goes on), and
    keep weave from logging a link per traced call (quiet_call_links).

    The recipe's agent-loop worker (recipes/agent_loop_worker.py) calls this before verl's
    AgentLoopWorker.__init__ runs RolloutTraceConfig.init.
    """
    from verl.utils.rollout_trace import RolloutTraceConfig

    original = RolloutTraceConfig.__dict__["init"].__func__
    if getattr(original, "_recipe_guarded", False):
        return

    def guarded_init(cls, project_name, experiment_name, backend, token2text=False,
                     max_samples_per_step_per_worker=None):
        if backend == "weave":
            quiet_call_links()  # here, in the worker process: the launcher's environment may not reach it
            if not _weave_ready(project_name):
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

    current = weave_client_context.get_weave_client()
    if current is not None:  # already initialised in this process
        return _usable(current, project_name)
    if not has_wandb_credentials():
        logger.warning("Weave tracing is OFF for this run: no WANDB_API_KEY (or `wandb login`) in this worker. "
                       "Training continues; set the key to get traces, or TRACE=off to silence this.")
        return False
    outcome: dict[str, Any] = {}

    def attempt() -> None:
        try:
            import weave

            outcome["client"] = weave.init(project_name)
        except BaseException as err:  # weave raises transport errors, SystemExit on bad keys, ...
            outcome["error"] = err

    thread = threading.Thread(target=attempt, name="weave-init", daemon=True)
    thread.start()
    thread.join(INIT_TIMEOUT_S)
    if "client" in outcome:
        return _usable(outcome["client"], project_name)
    reason = f"{type(outcome['error']).__name__}: {outcome['error']}" if "error" in outcome else (
        f"no answer from W&B within {INIT_TIMEOUT_S:.0f} s")
    logger.warning("Weave tracing is OFF for this run: weave.init(%r) failed (%s). Training continues without "
                   "traces; check network access to W&B, or set TRACE=off.", project_name, reason)
    return False


def _usable(client: Any, project_name: str) -> bool:
    """weave.init returns a client that silently records nothing when the trace server requires a newer weave
    (weave/trace/init_message.py) or WEAVE_DISABLED is set: count that as tracing off, and say so."""
    if getattr(client, "entity", None) != "DISABLED":
        return True
    logger.warning("Weave tracing is OFF for this run: weave.init(%r) returned a disabled client (the trace server "
                   "requires a newer weave: see weave's warning above and `pip install -U weave`; or WEAVE_DISABLED "
                   "is set). Training continues without traces.", project_name)
    return False
