"""The tracing client in every agent-loop worker: shaping.py (what a trace holds: text, a named root, the chat
view), relay_client.py (weave pointed at the node's trace relay), flush.py (the per-step flush), guard.py (a failed
weave.init turns tracing off, not the worker), sender.py (weave's batches posted as encoded), location.py (where
the traces open in W&B)."""
