"""Held-out accuracy and tool-call rate of a model folder, in-process, through verl's real ToolAgentLoop.

The recipe's config, agent loop, tool-call parser, calculator and reward (recipes/gsm8k/reward.py, strict); the only
stand-in is the LLM server: the CPU rollout server the training run uses (harness.cpu_backend.server), without
steering, so every token is the model's. A fast in-process scorer (seconds, no Ray) for choosing the SFT budget
among `sft.py --save_every` checkpoints; scripts/learn_cpu.sh scores its runs through the user's path instead
(`DEVICE=cpu scripts/eval_gsm8k.sh`). On one SFT start and the same 256 rows the two agreed within sampling
noise: 0.406 there, 0.391 here, tool-call rate 0.492 in both.

    python -m harness.learning.evaluate --model_dir /tmp/m --data_dir /tmp/data --temperature 1.0
    python -m harness.learning.evaluate --model_dir /tmp/m --data_dir /tmp/data_notools --tool_set none
    python -m harness.learning.evaluate --model_dir /tmp/m --data_dir /tmp/chain_data \
        --override data.max_response_length=192 --override actor_rollout_ref.rollout.multi_turn.max_assistant_turns=5
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path

# The sizes of config/profile/cpu_learn.yaml: the evaluation sees the limits training saw.
OVERRIDES = ("data.max_prompt_length=256", "data.max_response_length=96",
             "actor_rollout_ref.rollout.multi_turn.max_assistant_turns=3")


def evaluate(model_dir: Path, data_dir: Path, tool_set: str, temperature: float, limit: int | None,
             seed: int = 0, overrides: tuple[str, ...] = ()) -> dict:
    import pyarrow.parquet as pq
    from verl.workers.config import RolloutConfig

    from harness import agent_loop_inprocess as harness
    from harness.cpu_backend import ROLLOUT_NAME
    from harness.cpu_backend.server import CpuRolloutServer

    config = harness.compose_trainer_config(tool_set, (*OVERRIDES, *overrides))
    rollout = config.actor_rollout_ref.rollout
    # the training run's own rollout server (no steering): SGLang's length rule, the model's EOS and stop ids
    server = CpuRolloutServer(
        config=RolloutConfig(name=ROLLOUT_NAME, prompt_length=rollout.prompt_length,
                             response_length=rollout.response_length, load_format="auto", seed=seed),
        model_config={"path": str(model_dir), "override_config": {"attn_implementation": "sdpa"}}, replica_rank=0)
    rows = pq.read_table(data_dir / "test.parquet").to_pylist()[:limit]
    start = time.perf_counter()
    result = score_rollouts(config, server.tokenizer, server, rows, tool_set, temperature)
    return {"model": str(model_dir), "tool_set": tool_set, "temperature": temperature, **result,
            "wall_s": round(time.perf_counter() - start, 1)}


def score_rollouts(config, tok, server, rows: list[dict], tool_set: str, temperature: float) -> dict:
    """One rollout per row through the recipe's agent loop, which scores it as training does (the model's turns,
    the recipe's reward, strict): accuracy and tool-call rate, and by the rows' number of steps (the evaluation
    summary's by_ops: strict_acc_ops<k>, calls_per_op, ...)."""
    from harness import agent_loop_inprocess as harness
    from recipes.gsm8k.agent_loop import REWARD_EXTRA_INFO, ScoredToolAgentLoop

    tools = harness.load_tools(config) if tool_set != "none" else []
    sampling = {**harness.SAMPLING_PARAMS, "temperature": temperature}

    async def all_rows():
        outputs = []
        for row in rows:  # one at a time: the model generates one request at a time anyway
            loop = harness.build_agent_loop(config, tok, server, tools, ScoredToolAgentLoop)
            extra = {**row["extra_info"], "tools_kwargs": row["extra_info"].get("tools_kwargs") or {}}
            kwargs = harness.row_kwargs({**row, "extra_info": extra})  # tools-off rows carry no tools_kwargs
            kwargs.pop("agent_name")
            outputs.append(await loop.run(dict(sampling), **kwargs))
        return outputs

    from recipes.gsm8k.reward_keys import ACC_STRICT
    from recipes.results.scoring import by_ops, tool_use

    scores = [output.extra_fields[REWARD_EXTRA_INFO] for output in asyncio.run(all_rows())]
    return {"n": len(rows), "acc": sum(s[ACC_STRICT] for s in scores) / len(rows),
            "tool_call_rate": tool_use(scores)["tool_call_rate"], **by_ops(scores)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model_dir", required=True, nargs="+")
    p.add_argument("--data_dir", required=True, help="data_prep/gsm8k.py output (test.parquet) for --tool_set")
    p.add_argument("--tool_set", default="calculator", choices=("calculator", "none"))
    p.add_argument("--temperature", type=float, default=0.0, help="0: greedy (validation); 1.0: as rollouts sample")
    p.add_argument("--limit", type=int, default=None, help="the first N test rows")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--override", action="append", default=[], help="a hydra override after the one-step sizes "
                   "(repeatable), e.g. the chain task's data.max_response_length")
    args = p.parse_args(argv)
    for model_dir in args.model_dir:
        result = evaluate(Path(model_dir), Path(args.data_dir), args.tool_set, args.temperature, args.limit, args.seed,
                          tuple(args.override))
        print("[evaluate] " + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
