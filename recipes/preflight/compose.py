"""Compose the recipe config exactly as `python3 -m verl.trainer.main_ppo --config-path ... --config-name ...`
would, then run verl's own validation and build the config dataclasses verl otherwise builds only in workers."""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from recipes.constants import CONFIG_DIR, CONFIG_NAME


def compose_config(overrides: list[str], config_dir: Path = CONFIG_DIR, config_name: str = CONFIG_NAME) -> DictConfig:
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(config_dir), version_base=None):
        return compose(config_name=config_name, overrides=list(overrides))


def validate_like_verl(config: DictConfig) -> None:
    """verl's validate_config, as main_ppo runs it, plus the worker-side dataclass checks."""
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import omega_conf_to_dataclass, validate_config

    resolved = OmegaConf.create(OmegaConf.to_container(config, resolve=True))
    validate_config(config=resolved, use_reference_policy=need_reference_policy(resolved),
                    use_critic=need_critic(resolved))
    for path in ("actor_rollout_ref.rollout", "actor_rollout_ref.actor"):
        omega_conf_to_dataclass(OmegaConf.select(resolved, path))
