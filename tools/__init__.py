"""verl tools for the GSM8K recipe, loaded by class path from config/tool_config/*.yaml."""

# verl's agent-loop worker imports the tool classes right before it calls weave.init for tracing: the
# earliest point where recipe code runs in that worker. Make a failing weave.init (no key, W&B
# unreachable) switch tracing off with a warning instead of killing the worker.
from recipes.tracing import guard_trace_init

guard_trace_init()
