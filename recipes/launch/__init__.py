"""The launcher, `python -m recipes.launch` (what scripts/run_gsm8k_grpo.sh runs): knobs.py (knobs -> hydra overrides,
the one home of that mapping), decision.py (what a launch does: mode, overrides, relays, dry-run lines), training.py
(main_ppo as a watched child, signals), console.py (the environment that keeps known noise off the console),
relays.py (a trace relay on every node), ray_job.py (Ray job submission), plan.py (the dry-run plan)."""
