"""The launcher, `python -m recipes.launch` (what scripts/run_gsm8k_grpo.sh runs): the knobs become hydra overrides,
the preflight checks them, and main_ppo runs as a watched child (here, or as a Ray job on a cluster) beside a trace
relay on every node. docs/layout.md says which module holds which part."""
