"""The reward, verl 0.9.1's `reward.custom_reward_function` (path=recipes/gsm8k/reward.py, name=compute_score).

Called once per trajectory by the recipe's agent loop (recipes/gsm8k/agent_loop.py, through verl's own loader), with
`solution_str` = what the MODEL wrote: its turns as verl's response mask marks them, one per line. Tool output
never reaches this function, so a tool that prints the number (or a tool response the model is fed) can never
be scored as the model's answer, whatever chat template renders the tool turns.

Knobs (reward.custom_reward_function.reward_kwargs):
- method: "strict" (default: only an answer in the format the prompt asks for; GSM8K's: the number after the last
  `####`) or "flexible" (any answer the dataset's checker can read; GSM8K's: the last number).
- tool_call_bonus: added once when the model made at least one well-formed call of a tool the row offered
  (`extra_info.tools_kwargs`; default 0.0).
  The known remedy for tool-use collapse (verl PR #4998 used +0.1). It is paid for wrong answers too, as
  in that PR, so that calling a tool is never worse than not calling one; it is paid once, not per call,
  so spamming calls earns nothing more.

Besides the score: strict and flexible correctness, whether a strict answer was given, the tool calls (well-formed
and malformed, and whether there was one), `ref_ops`, the operations the row's reference solution works through (its
GSM8K `<<...>>` annotations), by which the evaluation summary breaks accuracy down, the trajectory's turns and the
row's tool set (which splits a validation dump of tools-on and tools-off rows).

Whether an answer is right is the row's dataset's to say: each dataset module of data_prep/ declares the data_source
its rows carry and its answer checker (recipes/gsm8k/datasets.py; GSM8K's is data_prep/gsm8k.py: `openai/gsm8k`, and
`openai/gsm8k_no_tools` for its tools-off rows). A data_source no module declares is an error, not a 0.
"""

from __future__ import annotations

from recipes.gsm8k.answers import reference_ops
from recipes.gsm8k.datasets import dataset_for
from recipes.gsm8k.reward_keys import (
    ACC,
    ACC_FLEXIBLE,
    ACC_STRICT,
    BAD_TOOL_CALLS,
    CALLED_TOOL,
    FORMAT_OK,
    PRED,
    REF_OPS,
    SCORE,
    TOOL_BONUS,
    TOOL_CALLS,
    TOOL_SET,
    TURNS,
)
from recipes.gsm8k.trajectory import count_tool_calls, offered_tools


def compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: str,
    extra_info: dict | None = None,
    method: str = "strict",
    tool_call_bonus: float = 0.0,
    **kwargs,
) -> dict:
    check_answer = dataset_for(data_source).check_answer  # raises, in one line, for a data_source none declares
    if method not in ("strict", "flexible"):
        raise ValueError(f"reward_kwargs.method must be 'strict' or 'flexible', not {method!r}")
    strict_pred, acc_strict = check_answer(solution_str, ground_truth, "strict")
    flexible_pred, acc_flexible = check_answer(solution_str, ground_truth, "flexible")
    correct = acc_strict if method == "strict" else acc_flexible
    good_calls, bad_calls = count_tool_calls(solution_str, offered_tools(extra_info))
    bonus = float(tool_call_bonus) if good_calls else 0.0
    # Every key is present for every sample, with one type each: verl batches them into reward_extra_info.
    return {
        SCORE: float(correct) + bonus,
        ACC: float(correct),
        ACC_STRICT: float(acc_strict),
        ACC_FLEXIBLE: float(acc_flexible),
        FORMAT_OK: float(strict_pred is not None),
        TOOL_CALLS: good_calls,
        BAD_TOOL_CALLS: bad_calls,
        TOOL_BONUS: bonus,
        REF_OPS: reference_ops((extra_info or {}).get("answer")),  # the row's reference steps (<<expr=value>>)
        PRED: (strict_pred if method == "strict" else flexible_pred) or "",
        CALLED_TOOL: float(good_calls > 0),
        TURNS: int((extra_info or {}).get("num_turns") or 0),  # the agent loop's (recipes/gsm8k/score.py)
        TOOL_SET: str((extra_info or {}).get("tool_set") or ""),
    }
