"""The production step's probe (scripts/probe_gpu_step.sh): one GRPO step of a profile's per-GPU share on one GPU,
timed phase by phase, its memory and throughput read, and projected onto the profile's node and run.

- shapes.py: the recipe's models' configurations, to make random weights of their shape where no weights are at hand
- random_model.py: a model folder of such random weights, with a tokenizer
- share.py: one GPU's share of a profile's step (its overrides) and the plan
- gpu_memory.py: each process's GPU memory, sampled while the step runs (nvidia-smi)
- projection.py: the step's phases, memory and tokens per second from verl's metrics, and the projection
- __main__.py: the command
"""
