"""The recipe's Python. The task (agent loop, reward, answers, tool calls, tool sets) is `recipes.gsm8k`, beside the
top-level `tools/` and `data_prep/`; tracing in every rollout worker is `recipes.tracing`, with the generic trace
relay and its client in `recipes.trace_relay`; the run machinery is `recipes.launch`, `recipes.preflight`,
`recipes.watchdog` and `recipes.trainer`; after a run, `recipes.results` and `recipes.export`; the GPU env's tools,
`recipes.gpu_env`. What no training run loads (stand-ins, the CPU backend, learning checks, benchmarks) is not in
this package: it lives with the scripts that use it (scripts/harness/)."""
