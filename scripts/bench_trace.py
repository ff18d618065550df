"""Benchmark: what Weave tracing costs the agent loop's thread, per traced call.

Runs the same scripted multi-turn rollouts (recipe agent loop, our calculator, offline Qwen2.5 tokenizer,
real weave client on the in-memory trace server) three ways: untraced, traced with the recipe's text-only
tracer, and traced the way verl logs by default (token-id lists included). Times are wall time of the
event loop that runs the rollouts, i.e. what the agent-loop worker pays.

    python scripts/bench_trace.py [--rollouts 32] [--reasoning_tokens 400]
    python scripts/bench_trace.py --quick       # 2 short rollouts: that it runs (`-m bench`), no figure

Target: <= 5 ms per traced call. Last line:
`RESULT trace_ms_per_call=<v> untraced_ms_per_call=<v> verl_default_ms_per_call=<v>`.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from unittest import mock

# before weave is imported: no error reports, no runs, no links printed
os.environ.setdefault("WANDB_ERROR_REPORTING", "false")
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WEAVE_PRINT_CALL_LINK", "false")

from tools.calculator import NAME as CALCULATOR  # noqa: E402

TARGET_MS = 5.0


def script(reasoning_tokens: int) -> list[str]:
    from harness.standins.scripted_llm import tool_call

    sentence = "She sold 48 clips, then half as many, so we add the two amounts."
    reasoning = " ".join([sentence] * (reasoning_tokens // 16))
    return [f"{reasoning}\n{tool_call(CALCULATOR, expression='48/2')}",
            f"{reasoning}\n{tool_call(CALCULATOR, expression='48+24')}",
            f"{reasoning}\n#### 72"]


async def run_all(config, tok, tools, rows, turns, traced: bool):
    from verl.utils.rollout_trace import rollout_trace_attr

    from harness import agent_loop_inprocess as harness
    from harness.standins.scripted_llm import ScriptedLLM
    from recipes.gsm8k.agent_loop import ScoredToolAgentLoop

    llm = ScriptedLLM(tok, lambda prompt: turns)

    async def one(i, row):
        with rollout_trace_attr(step=1, sample_index=i, rollout_n=0, validate=False, trace=traced):
            return await harness.run_rollout(config, tok, llm, tools, row, ScoredToolAgentLoop)

    return await asyncio.gather(*(one(i, row) for i, row in enumerate(rows)))


def timed(label, config, tok, tools, rows, turns, traced, server=None):
    start = time.perf_counter()
    asyncio.run(run_all(config, tok, tools, rows, turns, traced))
    seconds = time.perf_counter() - start
    calls = len(server.recorded_calls()) if server else 0
    traced = f", {calls} traced calls" if server else ""
    print(f"{label:>24}: {seconds * 1e3:9.1f} ms for {len(rows)} rollouts{traced}")
    return seconds


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rollouts", type=int, default=32)
    p.add_argument("--reasoning_tokens", type=int, default=400, help="tokens of reasoning per assistant turn")
    p.add_argument("--quick", action="store_true", help="--rollouts 2 --reasoning_tokens 48: that it runs, in seconds")
    args = p.parse_args(argv)
    if args.quick:
        args.rollouts, args.reasoning_tokens = 2, 48

    # heavy imports after the arguments: --help stays instant
    from verl.utils.rollout_trace import RolloutTraceConfig

    from data_prep.gsm8k_rows import SourceRecord, build_row
    from harness import agent_loop_inprocess as harness
    from harness.qwen_tokenizer import load_qwen25_tokenizer
    from harness.standins.weave_memory_server import install_memory_weave_client
    from recipes.gsm8k.tool_sets import get_tool_set
    from recipes.tracing import shaping as tracing

    tok = load_qwen25_tokenizer()
    config = harness.compose_trainer_config("calculator", ("actor_rollout_ref.rollout.response_length=4096",))
    tools = harness.load_tools(config)
    rows = [build_row(SourceRecord(f"Question {i}: Natalia sold 48 clips and half as many more. Total?", "#### 72",
                                   "bench", i), "train", get_tool_set("calculator")) for i in range(args.rollouts)]
    turns = script(args.reasoning_tokens)
    print(f"{args.rollouts} rollouts x 3 turns, {len(tok.encode(turns[0]))} tokens per assistant turn")

    RolloutTraceConfig.reset()
    server, client = install_memory_weave_client("bench-trace")
    RolloutTraceConfig.init("bench-trace", "bench", "weave", token2text=True)
    timed("warm-up", config, tok, tools, rows[:2], turns, traced=False)
    untraced = timed("untraced", config, tok, tools, rows, turns, traced=False)

    traced = timed("traced, recipe tracer", config, tok, tools, rows, turns, traced=True, server=server)
    client.flush()
    n_calls = len(server.recorded_calls())

    # verl's default: the raw weave client, token-id lists in every input and output
    server_raw, client_raw = install_memory_weave_client("bench-trace-raw")
    RolloutTraceConfig.get_instance().client = client_raw
    import recipes.gsm8k.agent_loop as loop_module

    # keep the raw client for this run: the recipe's tracer is not installed (whatever arguments the loop passes)
    with mock.patch.object(tracing, "install_text_only_tracer", return_value=True) as keep_raw, \
            mock.patch.object(loop_module, "install_text_only_tracer", keep_raw):
        raw = timed("traced, verl default", config, tok, tools, rows, turns, traced=True, server=server_raw)
    client_raw.flush()

    per_call = (traced - untraced) * 1e3 / n_calls
    raw_per_call = (raw - untraced) * 1e3 / max(1, len(server_raw.recorded_calls()))
    untraced_per_call = untraced * 1e3 / n_calls  # the same calls, untraced, for scale
    print(f"recipe tracer: {per_call:.2f} ms per traced call; verl default: {raw_per_call:.2f} ms "
          f"({raw_per_call / max(per_call, 1e-9):.1f}x); traced/untraced wall ratio {traced / untraced:.2f}")
    print(f"{'within' if per_call <= TARGET_MS else 'OVER'} the {TARGET_MS} ms per traced call target")
    print(f"RESULT trace_ms_per_call={per_call:.3f} untraced_ms_per_call={untraced_per_call:.3f} "
          f"verl_default_ms_per_call={raw_per_call:.1f}")
    RolloutTraceConfig.reset()
    return 0


if __name__ == "__main__":
    sys.exit(main())
