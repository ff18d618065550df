"""One Weave thread per traced GRPO group, each rollout's root showing its reward, the group's mean and its own
advantage as verl computes it.

verl's agent-loop worker runs each trajectory of its chunk as an asyncio task of its own and holds all n rewards of
a prompt only once it has gathered them (verl/experimental/agent_loop/agent_loop.py,
AgentLoopWorker.generate_sequences). So, in every worker process:
- the worker (recipes/gsm8k/worker.py) runs each traced training trajectory inside `weave.thread(<group>)`: the n
  roots of a prompt at a step become the n turns of one thread, their calls carry its id;
- the tracer (recipes/tracing/shaping.py) holds each finished root instead of sending it (`GroupBook.hold`);
- once verl has gathered the chunk, `close_step` computes the figures with verl's own
  `compute_grpo_outcome_advantage` on the same rewards its trainer turns into advantages (the loop's scores as
  `rm_scores`; `norm_adv_by_std_in_grpo` as configured) and finishes every held root with them, its real end time
  kept. A worker killed between a root's end and its step's end loses that root, as it loses calls weave still
  queues (docs/tracing.md).
"""

from __future__ import annotations

import contextvars
import datetime
import logging
import threading
from dataclasses import dataclass
from typing import Any

logger = logging.getLogger(__name__)

FIGURES = ("reward", "advantage", "group_mean", "group_std", "group_size")  # first in a held root's output
SUMMARY_KEY = "grpo"  # the same figures in the root's summary (weave merges a call's own summary into its end)
_EXPERIMENT_CHARS = 64  # no documented limit on a thread id; an experiment name is free text


@dataclass(frozen=True)
class Member:
    """The GRPO group of the trajectory running in this task: set by the worker before verl's traced root."""

    thread_id: str
    uid: str


MEMBER: contextvars.ContextVar[Member | None] = contextvars.ContextVar("grpo_member", default=None)


def thread_id(experiment: str, step: Any, sample_index: Any, uid: str) -> str:
    """`<experiment>/train/step12/prompt4031/<uid[:8]>`: step and prompt to find it by; the start of verl's uid (a
    uuid4 per prompt and step) keeps two runs under one experiment name, or a step run again, apart."""
    return f"{str(experiment)[:_EXPERIMENT_CHARS]}/train/step{step}/prompt{sample_index}/{str(uid)[:8]}"


def group_member(trajectory: dict, uid: Any, traced: bool) -> Member | None:
    """This trajectory's group, if it is a traced training rollout of a worker that traces to Weave; None for
    validation (its rows are padded across workers, and no advantage is computed for them)."""
    from verl.utils.rollout_trace import RolloutTraceConfig

    if not traced or uid is None or trajectory.get("validate") or RolloutTraceConfig.get_backend() != "weave":
        return None
    experiment = RolloutTraceConfig.get_instance().experiment_name
    return Member(thread_id(experiment, trajectory["step"], trajectory["sample_index"], uid), str(uid))


@dataclass
class _Held:
    call: Any
    output: Any
    kwargs: dict
    ended_at: datetime.datetime


class GroupBook:
    """The roots of this worker's traced groups held back until their step's rewards are known, by (uid,
    rollout_n)."""

    def __init__(self) -> None:
        self._held: dict[tuple[str, int], _Held] = {}
        self._lock = threading.Lock()

    def hold(self, call: Any, output: Any, kwargs: dict) -> bool:
        """Keep a finished root of a traced group (True), instead of finishing it now (False: not in a group)."""
        member = MEMBER.get()
        rollout_n = (getattr(call, "attributes", None) or {}).get("rollout_n")
        if member is None or rollout_n is None:
            return False
        from weave.trace.context import call_context

        # what weave's finish_call does to this task's context (weave/trace/weave_client.py, finish_call): the root
        # leaves the call stack and the thread's turn ends, so nothing later in the task becomes the root's child
        if getattr(call, "turn_id", None) == call.id and getattr(call, "thread_id", None):
            call_context.set_turn_id(None)
        call_context.pop_call(call.id)
        with self._lock:
            self._held[(member.uid, int(rollout_n))] = _Held(call, output, kwargs,
                                                             datetime.datetime.now(datetime.UTC))
        return True

    def take(self) -> dict[tuple[str, int], _Held]:
        with self._lock:
            held, self._held = self._held, {}
        return held


def rollout_numbers(index) -> list[int]:
    """rollout_n of each row, counted as verl's get_trajectory_info counts it (runs of equal dataset index)."""
    numbers, n = [], 0
    for i in range(len(index)):
        n = n + 1 if i > 0 and index[i - 1] == index[i] else 0
        numbers.append(n)
    return numbers


def group_figures(uids, index, rm_scores, response_mask, wanted: set[str], norm_adv_by_std_in_grpo: bool,
                  group_size: int) -> dict[tuple[str, int], dict]:
    """FIGURES of every row of the groups in `wanted` whose `group_size` rollouts are all here, keyed (uid,
    rollout_n). The advantage is verl's compute_grpo_outcome_advantage (verl/trainer/ppo/core_algos.py) on these
    groups' rows alone: a group's advantages depend on its own rewards only."""
    import torch
    from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage

    numbers = rollout_numbers(index)
    rows = [i for i, uid in enumerate(uids) if uid in wanted]
    sizes: dict[str, int] = {}
    for i in rows:
        sizes[uids[i]] = sizes.get(uids[i], 0) + 1
    rows = [i for i in rows if sizes[uids[i]] == group_size]  # a group split across workers: not annotated
    if not rows:
        return {}
    picked = torch.tensor(rows)
    rewards, mask = rm_scores[picked], response_mask[picked]
    group_uids = [uids[i] for i in rows]
    advantages, _ = compute_grpo_outcome_advantage(rewards, mask, group_uids,
                                                   norm_adv_by_std_in_grpo=norm_adv_by_std_in_grpo)
    scores = rewards.sum(dim=-1)
    by_uid: dict[str, list[int]] = {}
    for j, uid in enumerate(group_uids):
        by_uid.setdefault(uid, []).append(j)
    figures = {}
    for j, i in enumerate(rows):
        group = scores[by_uid[group_uids[j]]]
        # verl's own mean and std of the group (a group of one: 0 and 1)
        mean, std = (group.mean(), group.std()) if len(group) > 1 else (torch.tensor(0.0), torch.tensor(1.0))
        valid = mask[j].bool()
        figures[(group_uids[j], numbers[i])] = {
            "reward": float(scores[j]), "advantage": float(advantages[j][valid][0]) if valid.any() else 0.0,
            "group_mean": float(mean), "group_std": float(std), "group_size": len(group)}
    return figures


def close_step(tracer: Any, batch, output, config) -> dict:
    """After verl's generate_sequences (`output` None if it failed): finish every root this worker held this step,
    with its group's figures where they can be known. Never raises; returns what it did."""
    held = tracer.groups.take() if hasattr(tracer, "groups") else {}
    done = {"held": len(held), "annotated": 0, "skipped": None}
    if not held:
        return done
    figures: dict = {}
    try:
        figures, done["skipped"] = _figures(held, batch, output, config)
    except Exception as err:  # a trace must never fail a step: the roots still go, without the figures
        done["skipped"] = f"{type(err).__name__}: {err}"
    if done["skipped"]:
        logger.warning("GRPO figures not added to %d traced rollout(s): %s", len(held), done["skipped"])
    for key, root in held.items():
        out, stats = root.output, figures.get(key)
        if stats and isinstance(out, dict):
            out = {"reward": out.get("reward", stats["reward"]), **{k: stats[k] for k in FIGURES[1:]},
                   **{k: v for k, v in out.items() if k != "reward"}}
            root.call.summary = {**(root.call.summary or {}), SUMMARY_KEY: stats}
            done["annotated"] += 1
        try:
            tracer.client.finish_call(root.call, output=out, ended_at=root.ended_at, **root.kwargs)
        except Exception as err:
            logger.warning("Weave: a held rollout root was not finished: %s: %s", type(err).__name__, err)
    return done


def _figures(held: dict, batch, output, config) -> tuple[dict, str | None]:
    """(figures by (uid, rollout_n), why there are none)."""
    from omegaconf import OmegaConf

    algorithm = config.algorithm
    if output is None:
        return {}, "the step failed"
    if algorithm.adv_estimator != "grpo" or OmegaConf.select(config, "algorithm.use_kl_in_reward"):
        return {}, f"the advantage is not GRPO's outcome advantage here (adv_estimator={algorithm.adv_estimator})"
    if "rm_scores" not in output.batch.keys():
        return {}, "the agent loop gave verl no rewards (rm_scores)"
    norm = OmegaConf.select(config, "algorithm.norm_adv_by_std_in_grpo")
    figures = group_figures(batch.non_tensor_batch["uid"], batch.non_tensor_batch["index"],
                            output.batch["rm_scores"], output.batch["response_mask"],
                            {uid for uid, _ in held}, True if norm is None else bool(norm),
                            int(config.actor_rollout_ref.rollout.n))
    missing = len([key for key in held if key not in figures])
    return figures, (f"{missing} held root(s) have no whole group in this worker's chunk" if missing else None)
