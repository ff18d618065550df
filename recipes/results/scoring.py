"""The one scorer of dump lines: accuracy, tool use, pass@k and the by-operations breakdown, read from the scores the
run's agent loop gave each trajectory (recipes/gsm8k/agent_loop.py: the recipe's reward on the model's own turns),
which verl writes into every dump line (recipes/results/dumps.py reads them). Nothing is scored twice: a dump line is
what training and validation saw. The evaluation summary (`summarize`), the rollout report (`by_step`,
`by_step_and_ops`), Weave Evaluations and the learning checks all count here."""

from __future__ import annotations

from collections import defaultdict
from math import comb
from statistics import mean

from recipes.gsm8k.reward_keys import (
    ACC,
    ACC_FLEXIBLE,
    ACC_STRICT,
    BAD_TOOL_CALLS,
    FORMAT_OK,
    PRED,
    REF_OPS,
    SCORE,
    TOOL_CALLS,
)

# the reward's keys a validation summary needs in every line (REF_OPS is optional: dumps made before it lack it)
SCORE_FIELDS = (ACC_STRICT, ACC_FLEXIBLE, FORMAT_OK, TOOL_CALLS, BAD_TOOL_CALLS, PRED)


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples with c correct (Chen et al., 2021): 1 - C(n-c, k) / C(n, k)."""
    if k > n:
        raise ValueError(f"pass@{k} needs at least {k} samples per prompt, got {n}")
    return 1.0 if n - c < k else 1.0 - comb(n - c, k) / comb(n, k)


def score_record(record: dict) -> dict:
    """One dump line's scores (SCORE_FIELDS, and REF_OPS where present), as its run's agent loop gave them."""
    missing = [key for key in SCORE_FIELDS if key not in record]
    if missing:
        raise ValueError(f"a dump line has no {', '.join(missing)}: the run's reward function "
                         "(reward.custom_reward_function) must return recipes/gsm8k/reward.py's keys")
    return {key: record[key] for key in SCORE_FIELDS} | ({REF_OPS: int(record[REF_OPS])} if REF_OPS in record else {})


def tool_use(lines: list[dict]) -> dict:
    """The share of lines with a well-formed tool call, and the calls per line."""
    return {"tool_call_rate": mean(line[TOOL_CALLS] > 0 for line in lines),
            "tool_calls_per_answer": mean(line[TOOL_CALLS] for line in lines)}


def summarize(records: list[dict], ks: tuple[int, ...] = (1,)) -> dict:
    """A validation step's summary. records: dump lines of one step (input, output, gts and the reward's keys).
    Prompts are identified by their input text."""
    if not records:
        raise ValueError("no records to score")
    scored = [{"prompt": r["input"], **score_record(r)} for r in records]
    groups: dict[str, list[dict]] = defaultdict(list)
    for s in scored:
        groups[s["prompt"]].append(s)
    n = min(len(g) for g in groups.values())
    summary = {
        "answers": len(scored), "prompts": len(groups), "samples_per_prompt": n,
        "strict_acc": mean(s[ACC_STRICT] for s in scored),
        "flexible_acc": mean(s[ACC_FLEXIBLE] for s in scored),
        "format_ok": mean(s[FORMAT_OK] for s in scored),
        **tool_use(scored),
    }
    if all(REF_OPS in s for s in scored):
        summary.update(by_ops(scored))
    for k in ks:
        if k <= n:
            for method, key in (("strict", ACC_STRICT), ("flexible", ACC_FLEXIBLE)):
                summary[f"pass@{k}_{method}"] = mean(
                    pass_at_k(len(g), int(sum(s[key] for s in g)), k) for g in groups.values())
    return summary


def by_ops(scored: list[dict]) -> dict:
    """Accuracy and tool calls by the number of operations the reference solution needs (REF_OPS, its GSM8K
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
        out[f"strict_acc_ops{ops}"] = mean(s[ACC_STRICT] for s in group)
        out[f"tool_calls_per_answer_ops{ops}"] = tool_use(group)["tool_calls_per_answer"]
    chained = [s for s in scored if s[REF_OPS] >= 2 and s[ACC_STRICT]]
    out["correct_multi_op_answers"] = len(chained)
    out["calls_per_op"] = mean(min(1.0, s[TOOL_CALLS] / s[REF_OPS]) for s in chained) if chained else 0.0
    return out


def by_step(records: list[dict]) -> list[dict]:
    """Per step of a dump folder (normalised lines, recipes/results/dumps.py): rollouts, mean reward, accuracy (the
    reward's own method), tool use and response length."""
    groups: dict[int, list[dict]] = defaultdict(list)
    for r in records:
        groups[r["step"]].append(r)
    steps = []
    for step, rs in sorted(groups.items()):
        tools = tool_use(rs)
        steps.append({"step": step, "rollouts": len(rs), "reward": mean(r[SCORE] for r in rs),
                      "accuracy": mean(r[ACC] for r in rs), "tool_call_rate": tools["tool_call_rate"],
                      "tool_calls_per_rollout": tools["tool_calls_per_answer"],
                      "response_chars": mean(r["response_chars"] for r in rs)})
    return steps


def by_step_and_ops(records: list[dict]) -> dict[int, list[dict]]:
    """Per number of reference operations (REF_OPS), the per-step accuracy and tool calls per rollout:
    {ops: [{"step", "rollouts", "accuracy", "tool_calls_per_rollout"}, ...]}. Empty when a dump line has no REF_OPS
    (dumps made before the reward gave it)."""
    if not records or any(REF_OPS not in r for r in records):
        return {}
    groups: dict[int, list[dict]] = defaultdict(list)
    for r in records:
        groups[int(r[REF_OPS])].append(r)
    return {ops: [{k: v for k, v in s.items() if k in ("step", "rollouts", "accuracy", "tool_calls_per_rollout")}
                  for s in by_step(rs)] for ops, rs in sorted(groups.items())}
