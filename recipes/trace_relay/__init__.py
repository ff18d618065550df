"""Node-local trace relay: no Weave trace lost when W&B is slow, down for a while, or never reachable.

weave alone delivers only while its process lives and W&B answers: a flush during an outage drops the batch,
and its write-ahead log does not hold up across processes (weave-0.54 facts). The agent-loop workers' weave
clients talk to their node's relay instead (recipes.trace_relay.client.use_trace_relay); it writes each trace
request to
that node's disk before answering, sends the spool to W&B in order with unlimited retry, and what it could not
send stays in the spool for `gsm8k-upload-traces`, from any machine that reaches W&B.

    python -m recipes.trace_relay serve --spool DIR [--url-file FILE]   # a relay kept on one address (keeper.py)

A relay runs on every node of a run (recipes/launch/relays.py starts them): on one node the launcher keeps it; on a
Ray cluster a NodeRelayKeeper actor pinned to each node does (on_ray.py), and each worker finds its node's relay by
name. Either keeper holds the relay's address for the whole run and replaces a relay that dies or stops answering
(keeper.py); at the end each relay drains and says, per node, what it sent and what is left.
"""
