"""Each setting has one home. verl's ppo_trainer holds the defaults; config/gsm8k_multiturn_grpo.yaml only what
the recipe changes; a profile only what its hardware changes; the launcher only per-run values (paths, names).
A value written in two of these layers is a value that one day gets edited in only one of them."""

import pytest
import yaml

from recipes.constants import CONFIG_DIR, CONFIG_NAME, PROFILE_DIR
from recipes.preflight.compose import compose_config, validate_like_verl
from testkit.launcher import override_dict

pytestmark = pytest.mark.unit

PROFILES = sorted(p.stem for p in PROFILE_DIR.glob("*.yaml"))
NOT_SETTINGS = ("hydra", "defaults")


def leaves(tree: dict, prefix: str = ""):
    for key, value in (tree or {}).items():
        if prefix == "" and key in NOT_SETTINGS:
            continue
        if isinstance(value, dict) and value:
            yield from leaves(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", value


def yaml_leaves(path) -> dict:
    return dict(leaves(yaml.safe_load(path.read_text())))


@pytest.fixture(scope="module")
def verl_defaults():
    from hydra import compose, initialize_config_module
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    with initialize_config_module(config_module="verl.trainer.config", version_base=None):
        return compose(config_name="ppo_trainer")


@pytest.fixture(scope="module")
def launcher_settings(launcher_overrides) -> dict:
    """What the launcher sets on its own, with no knob in the environment (the profile is chosen, not set)."""
    settings = override_dict(launcher_overrides)
    settings.pop("profile")
    return settings


def value_at(config, key):
    from omegaconf import OmegaConf

    value = OmegaConf.select(config, key)
    return OmegaConf.to_container(value) if OmegaConf.is_config(value) else value


def test_the_recipe_yaml_repeats_no_verl_default(verl_defaults):
    repeated = {k: v for k, v in yaml_leaves(CONFIG_DIR / f"{CONFIG_NAME}.yaml").items()
                if value_at(verl_defaults, k) == v}
    assert not repeated, f"verl's ppo_trainer already has these values; drop them from the recipe YAML: {repeated}"


@pytest.mark.parametrize("profile", PROFILES)
def test_a_profile_changes_only_what_differs_from_the_recipe(profile):
    recipe = compose_config(["profile=8xh100"])  # 8xh100 is the recipe itself: an empty profile
    repeated = {k: v for k, v in yaml_leaves(PROFILE_DIR / f"{profile}.yaml").items() if value_at(recipe, k) == v}
    assert not repeated, f"profile {profile} repeats the recipe's values: {repeated}"
    assert (PROFILE_DIR / f"{profile}.yaml").read_text().startswith("# @package _global_")


def test_the_8xh100_profile_is_the_recipe_itself():
    assert yaml_leaves(PROFILE_DIR / "8xh100.yaml") == {}


def test_the_launcher_sets_no_value_that_a_config_file_sets(launcher_settings):
    in_files = set(yaml_leaves(CONFIG_DIR / f"{CONFIG_NAME}.yaml"))
    for profile in PROFILES:
        in_files |= set(yaml_leaves(PROFILE_DIR / f"{profile}.yaml"))
    both = sorted(set(launcher_settings) & in_files)
    assert not both, f"set by the launcher on every run AND in a config file (the file's value never wins): {both}"


@pytest.mark.parametrize("profile", PROFILES)
def test_every_profile_composes_and_verl_validates_it(profile, launcher_settings):
    overrides = [f"{k}={v}" for k, v in launcher_settings.items()]
    config = compose_config([f"profile={profile}", *overrides])
    validate_like_verl(config)
    for key, value in yaml_leaves(PROFILE_DIR / f"{profile}.yaml").items():
        assert value_at(config, key) == value, f"{profile}: {key} did not take effect"
