"""Values of the wrong kind (`actor_rollout_ref.rollout.n=abc`): hydra composes any string, and verl's validation
then fails on arithmetic with a message about string formatting. Compared with the config composed without the
user's overrides, each such value gets one line that names the key and what it takes."""

from __future__ import annotations

from omegaconf import DictConfig, OmegaConf


def _expected(reference, value) -> str | None:
    """What kind of value the key takes, when `value` is not one (bool before int: a bool is an int to Python)."""
    if isinstance(reference, bool):
        return None if isinstance(value, bool) else "true or false"
    is_number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if isinstance(reference, int):
        return None if is_number and float(value).is_integer() else "a whole number"
    if isinstance(reference, float):
        return None if is_number else "a number"
    return None


def _walk(reference: dict, config: dict, prefix: str):
    for key, value in config.items():
        if key not in reference:
            continue
        path, ref = f"{prefix}{key}", reference[key]
        if isinstance(ref, dict) and isinstance(value, dict):
            yield from _walk(ref, value, f"{path}.")
        elif isinstance(value, str) and value.startswith("${"):
            continue  # an interpolation: checked where it points
        elif value is not None and ref is not None and (kind := _expected(ref, value)) is not None:
            yield path, value, ref, kind


def mistyped_values(config: DictConfig, reference: DictConfig) -> list[str]:
    """One line per value of `config` whose kind differs from the same key's in `reference` (numbers and
    true/false only; keys either side lacks, nulls and interpolations are left alone)."""
    ref = OmegaConf.to_container(reference, resolve=False)
    got = OmegaConf.to_container(config, resolve=False)
    return [f"{path}={value!r} is not {kind} (the recipe's value: {default!r}); fix that override"
            for path, value, default, kind in _walk(ref, got, "")]
