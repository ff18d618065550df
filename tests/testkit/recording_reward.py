"""A reward file that is not the recipe's, to see a user's reward reach training and traces: the recipe's reward
x10 + 0.5 (a value no recipe kwarg gives), plus a `source` key, and every call's inputs kept in CALLS. Select with
reward.custom_reward_function.path=<repo>/tests/testkit/recording_reward.py (name compute_score)."""

import importlib

from recipes.gsm8k.reward import compute_score as _recipe_score

CALLS: list[dict] = []  # of the module imported as testkit.recording_reward (verl loads this file by path)


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs) -> dict:
    importlib.import_module("testkit.recording_reward").CALLS.append(
        {"solution_str": solution_str, "ground_truth": ground_truth, "extra_info": extra_info, "kwargs": kwargs})
    result = dict(_recipe_score(data_source, solution_str, ground_truth, extra_info, **kwargs))
    result["score"] = 10 * result["score"] + 0.5
    result["source"] = "recording_reward"
    return result
