"""Summarize a validation dump: strict and flexible accuracy, tool use and pass@k, read from the scores the run's
agent loop gave each trajectory (recipes/agent_loop.py: the recipe's reward on the model's own turns), which verl
writes into every dump line. Nothing is scored twice: a dump line is what training and validation saw."""

from __future__ import annotations

from collections import defaultdict
from math import comb
from statistics import mean

# what recipes/reward.py returns and verl dumps beside each line's "score"
SCORE_FIELDS = ("acc_strict", "acc_flexible", "format_ok", "num_tool_calls", "num_bad_tool_calls", "pred")
REF_OPS = "ref_ops"  # the reward's count of the reference solution's steps; dumps made before it lack it


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples with c correct (Chen et al., 2021): 1 - C(n-c, k) / C(n, k)."""
    if k > n:
        raise ValueError(f"pass@{k} needs at least {k} samples per prompt, got {n}")
    return 1.0 if n - c < k else 1.0 - comb(n - c, k) / comb(n, k)


def score_record(record: dict) -> dict:
    """One dump line's scores (SCORE_FIELDS), as its run's agent loop gave them."""
    missing = [key for key in SCORE_FIELDS if key not in record]
    if missing:
        raise ValueError(f"a dump line has no {', '.join(missing)}: the run's reward function "
                         "(reward.custom_reward_function) must return recipes/reward.py's keys")
    return {key: record[key] for key in SCORE_FIELDS} | ({REF_OPS: int(record[REF_OPS])} if REF_OPS in record else {})


def summarize(records: list[dict], ks: tuple[int, ...] = (1,)) -> dict:
    """records: dump lines of one step (input, output, gts). Prompts are identified by their input text."""
    if not records:
        raise ValueError("no records to score")
    scored = [{"prompt": r["input"], **score_record(r)} for r in records]
    groups: dict[str, list[dict]] = defaultdict(list)
    for s in scored:
        groups[s["prompt"]].append(s)
    n = min(len(g) for g in groups.values())
    summary = {
        "answers": len(scored), "prompts": len(groups), "samples_per_prompt": n,
        "strict_acc": mean(s["acc_strict"] for s in scored),
        "flexible_acc": mean(s["acc_flexible"] for s in scored),
        "format_ok": mean(s["format_ok"] for s in scored),
        "tool_calls_per_answer": mean(s["num_tool_calls"] for s in scored),
        "tool_call_rate": mean(s["num_tool_calls"] > 0 for s in scored),
    }
    if all(REF_OPS in s for s in scored):
        summary.update(by_ops(scored))
    for k in ks:
        if k <= n:
            for method in ("strict", "flexible"):
                summary[f"pass@{k}_{method}"] = mean(
                    pass_at_k(len(g), int(sum(s[f"acc_{method}"] for s in g)), k) for g in groups.values())
    return summary


def by_ops(scored: list[dict]) -> dict:
    """Accuracy and tool calls by the number of operations the reference solution needs (`ref_ops`, its GSM8K
    `<<...>>` steps): `answers_ops<k>`, `strict_acc_ops<k>`, `tool_calls_per_answer_ops<k>` per k; and
    `calls_per_op`: over the correct answers that needed 2 or more operations, the mean share of those operations
    that went through a well-formed tool call (calls / operations, at most 1 per answer; 0.0 when there is no such
    answer, with `correct_multi_op_answers` saying how many there were). Near 1, the model chained its calls; well
    below, it skipped steps and got there anyway."""
    groups: dict[int, list[dict]] = defaultdict(list)
    for s in scored:
        groups[s[REF_OPS]].append(s)
    out: dict = {}
    for ops in sorted(groups):
        group = groups[ops]
        out[f"answers_ops{ops}"] = len(group)
        out[f"strict_acc_ops{ops}"] = mean(s["acc_strict"] for s in group)
        out[f"tool_calls_per_answer_ops{ops}"] = mean(s["num_tool_calls"] for s in group)
    chained = [s for s in scored if s[REF_OPS] >= 2 and s["acc_strict"]]
    out["correct_multi_op_answers"] = len(chained)
    out["calls_per_op"] = mean(min(1.0, s["num_tool_calls"] / s[REF_OPS]) for s in chained) if chained else 0.0
    return out
