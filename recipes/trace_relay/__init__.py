"""Node-local trace relay: no Weave trace lost when W&B is slow, down for a while, or never reachable.

weave alone delivers only while its process lives and W&B answers: a flush during an outage drops the batch,
and its write-ahead log does not hold up across processes (weave-0.54 facts). The agent-loop workers' weave
clients talk to this relay instead (GSM8K_RECIPE_TRACE_RELAY, see recipes.tracing.use_trace_relay); it writes
each trace request to disk before answering, sends the spool to W&B in order with unlimited retry, and what
it could not send stays in the spool for `scripts/upload_traces.py`, from any machine that reaches W&B.

    python -m recipes.trace_relay serve --spool OUTPUT_DIR/trace_spool --url-file OUTPUT_DIR/trace_relay.url
"""
