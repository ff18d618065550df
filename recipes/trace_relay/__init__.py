"""Node-local trace relay: no Weave trace lost when W&B is slow, down for a while, or never reachable.

weave alone delivers only while its process lives and W&B answers: a flush during an outage drops the batch,
and its write-ahead log does not hold up across processes (weave-0.54 facts). The agent-loop workers' weave
clients talk to this relay instead (GSM8K_RECIPE_TRACE_RELAY, see recipes.tracing.use_trace_relay); it writes
each trace request to disk before answering, sends the spool to W&B in order with unlimited retry, and what
it could not send stays in the spool for `scripts/upload_traces.py`, from any machine that reaches W&B.
`serve` holds the relay's address for the whole run and starts a relay that dies again on it (supervisor.py).

    python -m recipes.trace_relay serve --spool OUTPUT_DIR/trace_spool --url-file OUTPUT_DIR/trace_relay.url

scripts/run_gsm8k_grpo.sh runs it (TRACE_RELAY=auto, the default, when the run traces; TRACE_RELAY=offline for
an air-gapped cluster) beside main_ppo on the node it launches on, stops it after main_ppo and prints its summary.

Multi-node (a Ray job): no relay. It listens on one node's loopback, and a worker started by another node's raylet
neither inherits the launcher's environment nor could reach that address; a node-local relay per node would need
someone to start, stop and drain it on every node. Workers there trace straight to W&B, flushed after every
rollout step (recipes.tracing.TraceFlusher): nothing is lost when training ends, but calls made during a W&B
outage longer than weave's own retries are. A worker given a relay URL it cannot reach checks (RELAY_HEALTH_PATH)
and keeps tracing straight to W&B.
"""
