"""`python -m recipes.trainer.main_ppo --config-path ... --config-name ... [overrides]`: verl's main_ppo with the
recipe's TaskRunner (recipes/trainer/trainer.py), which the launcher runs in its place.

Everything else is verl's: the device, validate_config, run_ppo (ray.init, the TaskRunner actor, ray.get); verl's
run_ppo takes the TaskRunner class for recipes to change. trainer.use_v1=true (which the recipe does not run) goes
to verl's V1 TaskRunner unchanged: no stop at a step boundary there.
"""

from __future__ import annotations

import hydra


@hydra.main(config_path=None, config_name=None, version_base=None)
def main(config) -> None:
    from verl.trainer.main_ppo import TaskRunnerV1, run_ppo
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config
    from verl.utils.device import auto_set_device

    auto_set_device(config)
    validate_config(config=config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config))
    if config.trainer.use_v1:
        run_ppo(config, task_runner_class=TaskRunnerV1)
        return
    from recipes.trainer.trainer import StoppableTaskRunner

    run_ppo(config, task_runner_class=StoppableTaskRunner)


if __name__ == "__main__":
    main()
