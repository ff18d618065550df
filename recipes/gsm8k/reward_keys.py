"""The reward's result: the keys recipes/gsm8k/reward.py returns for every trajectory and verl writes beside each
dump line's "score". Every reader (the scorer of dump lines, Weave Evaluations, the trace root, the learning
checks) names them from here."""

SCORE = "score"  # the training reward: correctness plus any tool-call bonus
ACC = "acc"  # correct by the configured method (reward_kwargs.method)
ACC_STRICT = "acc_strict"  # the number after the last `####` matches
ACC_FLEXIBLE = "acc_flexible"  # the last number matches
FORMAT_OK = "format_ok"  # a `####` answer was given
TOOL_CALLS = "num_tool_calls"  # well-formed calls of a tool the row offered
BAD_TOOL_CALLS = "num_bad_tool_calls"  # malformed calls, or calls of a tool not offered
TOOL_BONUS = "tool_bonus"  # reward_kwargs.tool_call_bonus when paid, else 0
REF_OPS = "ref_ops"  # the operations the row's reference solution works through (its `<<...>>` steps)
PRED = "pred"  # the answer read from the model's turns ("" for none)
CALLED_TOOL = "called_tool"  # 1.0 when TOOL_CALLS > 0: verl's mean of it per data_source is the tool-call rate
TURNS = "turns"  # the trajectory's num_turns, per data_source (verl's own mean mixes all validation files)
TOOL_SET = "tool_set"  # the row's tool set (extra_info.tool_set): splits one validation dump into tools on and off
REWARD_KEYS = (SCORE, ACC, ACC_STRICT, ACC_FLEXIBLE, FORMAT_OK, TOOL_CALLS, BAD_TOOL_CALLS, TOOL_BONUS, REF_OPS, PRED,
               CALLED_TOOL, TURNS, TOOL_SET)
