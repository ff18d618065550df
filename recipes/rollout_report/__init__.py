"""Offline report from verl's rollout/validation dumps (trainer.rollout_data_dir / validation_data_dir)."""
