"""Learning broken on purpose: the recipe's reward with its sign flipped. Under GRPO, -score
gives every rollout exactly the negated advantage (the group mean flips, the group std stays), so a run with it
must LOSE accuracy where the real reward gains it. Select with
reward.custom_reward_function.path=<repo>/tests/testkit/flipped_reward.py (name compute_score)."""

from recipes.gsm8k.reward import compute_score as _recipe_score


def compute_score(*args, **kwargs) -> dict:
    result = dict(_recipe_score(*args, **kwargs))
    result["score"] = -result["score"]
    return result
