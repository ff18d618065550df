"""Tracing in every agent-loop worker: shaping.py (what a trace holds: text, a named root, the chat view),
groups.py (a GRPO group as one Weave thread, verl's advantages on its roots), volume.py (what the traces weigh,
which groups a step traces), flush.py (the per-step flush), guard.py (a failed weave.init turns tracing off, not the
worker), location.py (where the traces open in W&B). Weave's client pointed at the node's trace relay, and its
batches posted as encoded, are the relay's client: recipes/trace_relay/client.py and sender.py."""
