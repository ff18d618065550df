"""Keys verl 0.9.1 accepts (they compose and pass validate_config) but reads nowhere, from old tutorials.
Each was checked against the installed verl source: the key is never read, or read into nothing."""

from __future__ import annotations

import re

# (pattern over the override's key, what to do instead)
STALE_KEYS: list[tuple[re.Pattern, str]] = [
    (re.compile(r"^trainer\.rollout_trace\."),
     "is read by nothing in verl 0.9.1; use actor_rollout_ref.rollout.trace.* (backend, token2text, ...)"),
    (re.compile(r"^custom_reward_function\."),
     "(top level) is ignored by verl 0.9.1; use reward.custom_reward_function.{path,name}"),
    (re.compile(r"^actor_rollout_ref\.rollout\.mode$"),
     "is not a choice in verl 0.9.1: async is the only rollout mode (sync raises)"),
    (re.compile(r"^actor_rollout_ref\.rollout\.multi_turn\.enable$"),
     "has no effect in verl 0.9.1: the row's agent_name (or rollout.agent.default_agent_loop) picks the loop"),
    (re.compile(r"^actor_rollout_ref\.rollout\.over_sample_rate$"), "is read by nothing in verl 0.9.1"),
    (re.compile(r"^actor_rollout_ref\.rollout\.multi_stage_wake_up$"), "is read by nothing in verl 0.9.1"),
    (re.compile(r"^data\.return_raw_chat$"),
     "has no effect in verl 0.9.1: agent loops always get the raw chat"),
]


def override_key(override: str) -> str:
    """`+a.b=1` / `++a.b=1` / `~a.b` -> `a.b`."""
    return override.lstrip("+~").split("=", 1)[0].strip()


def stale_warnings(overrides: list[str]) -> list[str]:
    warnings = []
    for override in overrides:
        key = override_key(override)
        for pattern, advice in STALE_KEYS:
            if pattern.search(key):
                warnings.append(f"'{override}': {key} {advice}")
    return warnings
