"""The preflight's pieces in-process: stale keys, the YAML's reward knobs as verl reads them, module checks."""

import pytest

from recipes.launch.knobs import compose_launch_config
from recipes.preflight.compose import compose_config, validate_like_verl
from recipes.preflight.stale_keys import stale_warnings

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    "override",
    [
        "+trainer.rollout_trace.backend=weave", "+trainer.rollout_trace.token2text=True",
        "+custom_reward_function.path=recipes/gsm8k/reward.py", "custom_reward_function.name=compute_score",
        "actor_rollout_ref.rollout.mode=async", "actor_rollout_ref.rollout.multi_turn.enable=True",
        "actor_rollout_ref.rollout.over_sample_rate=0.1", "actor_rollout_ref.rollout.multi_stage_wake_up=True",
        "data.return_raw_chat=True",
    ],
)
def test_each_stale_key_is_flagged(override):
    (warning,) = stale_warnings([override])
    assert warning.startswith(f"'{override}'")


def test_current_keys_are_not_flagged():
    assert stale_warnings(["actor_rollout_ref.rollout.trace.backend=weave", "reward.custom_reward_function.path=x",
                           "actor_rollout_ref.rollout.multi_turn.format=hermes", "trainer.use_v1=False"]) == []


def test_reward_kwargs_reach_the_reward_function_as_verl_loads_it(repo_root):
    """verl's own loader reads reward.custom_reward_function (path, name, reward_kwargs) from our config."""
    from verl.trainer.ppo.reward import get_custom_reward_fn

    config = compose_launch_config(overrides=["reward.custom_reward_function.reward_kwargs.tool_call_bonus=0.1"])
    validate_like_verl(config)
    reward_fn = get_custom_reward_fn(config)
    call = '<tool_call>{"name": "calculator", "arguments": {"expression": "1"}}</tool_call>'
    result = reward_fn(data_source="openai/gsm8k", solution_str=f"{call}\n#### 72", ground_truth="72", extra_info={})
    assert result["score"] == pytest.approx(1.1) and result["tool_bonus"] == 0.1


def test_a_default_launch_traces_on_the_trainer_that_records(launcher_overrides):
    """The config main_ppo gets from a default launch (the launcher's own overrides over the recipe), not the
    YAML alone: tracing to Weave, decoded text, and verl's legacy trainer (V1 never traces agent loops)."""
    config = compose_config(launcher_overrides)
    trace = config.actor_rollout_ref.rollout.trace
    assert (trace.backend, trace.token2text, config.trainer.use_v1) == ("weave", True, False)
    assert (trace.project_name, trace.experiment_name) == \
        (config.trainer.project_name, "gsm8k_calculator_Qwen2.5-3B-Instruct_8xh100")
