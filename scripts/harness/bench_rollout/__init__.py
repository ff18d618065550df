"""Benchmark: a production rollout step of the recipe on CPU: verl 0.9.1's real agent-loop manager and workers in a
real local Ray cluster, the recipe's config for PROFILE=8xh100, its tools, parser, reward, tracing and trace relay,
against LLM servers that answer at once (scripts/harness/standins/gsm8k_replay_llm.py: GSM8K's own training solutions
replayed as hermes calculator calls, with malformed calls, wrong answers, tool-free and over-long answers mixed in).

    python scripts/bench_rollout.py [--steps 3] [--prompts 256] [--n 16] [--workers 8] [--trace-all]
    python scripts/bench_rollout.py --arms recipe --steps 2 --prompts 8 --n 4 --workers 2   # the CI test's run

The arms below run side by side, each with its own manager and its share of --workers (fresh processes), and each
step every arm gets the same --prompts / arms prompts x --n trajectories, fed as verl's trainer feeds them
(RLHFDataset over the real GSM8K train split, uid, n interleaved repeats, global_steps): every worker has the
full step's per-worker load, and the arms compare step by step under the same load on the machine:
  plain            verl's AgentLoopManager + ToolAgentLoop, hermes parser, no tracing, no in-loop scoring (baseline)
  verl_weave       the same with verl's own weave tracing at the recipe's rate (baseline)
  recipe_untraced  the recipe as the launcher composes it, TRACE=off
  recipe           the recipe as the launcher composes it (its trace rate; --trace-all: every trajectory)
Traces go through the recipe's trace relay (started as the launcher starts it) to the W&B endpoint in
WANDB_BASE_URL / WF_TRACE_SERVER_URL when set, else to a loopback W&B stand-in of the bench's own; a recorder
between the relay and that endpoint notes each call the endpoint acknowledges. Nothing else leaves 127.0.0.1.

Per step and arm: wall time; each agent-loop worker's CPU-seconds (split by where they go with py-spy:
verl's loop and Ray, the recipe's parser, tool, scoring, trace summary, tracer and flush); trajectories per
CPU-second; worker RSS after step 1 and at the end; traced calls and bytes; calls acknowledged by the endpoint,
lag from a call's end to that acknowledgement, the relay's spool. Per traced trajectory of the recipe arm: the bytes
the endpoint acknowledged (each call as weave encodes it), overall and by the model's turns, and what that makes a
step and a day at the 8xH100 profile's trace rate (recipes/tracing/volume.py). Goals (a benchmark, not a timed
test): recipe untraced <= 1.10x plain per trajectory; tracing at the profile's rate <= 2% of worker CPU; worker RSS
growth < 50 MB over 50 steps (--arms recipe --steps 51 at a reduced shape); with --trace-all every traced
trajectory acknowledged exactly once. Last line:
`RESULT trajectories=<t> steps=<N> traced=<expected> acknowledged=<a> lost_traces=<l> duplicate_traces=<d>
recipe_cpu_ratio=<x> trace_cpu_share=<y> worker_rss_growth_mb=<m> relay_lag_p99_ms=<p> trace_bytes_per_trajectory=<b>
trace_bytes_by_turns=<b1,...,b5> trace_mb_per_step=<s> trace_gb_per_day=<g>`: t over all arms; the traces, RSS and
lag of the recipe arm; x = recipe_untraced / plain worker CPU per trajectory; y = what tracing
adds to the recipe arm's worker CPU (against recipe_untraced, step by step; without that arm, as measured in the
workers: the traced calls, the trace summary and weave's threads); b: the recipe arm's bytes per traced trajectory
(by the model's turns, 1 to 5; `-` where none ran); s, g: b projected to the 8xH100 profile's rate.
"""

from __future__ import annotations

import os

# the bench's own process: no Sentry, no tokenizer threads (the workers get NO_EGRESS_ENV)
os.environ.setdefault("WANDB_ERROR_REPORTING", "false")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

PHASES = ("plain", "verl_weave", "recipe_untraced", "recipe")
# docs/configuration.md "Step time on 8xH100 (estimate)": a step's rollout (when the agent loop works); the whole
# step's estimate is the trace volume's (recipes/tracing/volume.py)
ROLLOUT_ESTIMATE_S = 30
TRACED_PHASE = "recipe"
PROFILE = "8xh100"
EXPERIMENT = "bench_rollout_{phase}"
# Every HTTPS request a Ray worker might make (weave.init's version check on PyPI, which verl's own weave path
# does not switch off) goes to a refused loopback port instead; loopback traffic (the relay) goes direct.
NO_EGRESS_ENV = {"HTTPS_PROXY": "http://127.0.0.1:9", "https_proxy": "http://127.0.0.1:9",
                 "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost",
                 "WANDB_ERROR_REPORTING": "false", "WEAVE_USE_SERVER_CACHE": "false", "WEAVE_PRINT_CALL_LINK": "false",
                 "RAY_USAGE_STATS_ENABLED": "0", "TOKENIZERS_PARALLELISM": "false"}


def log(msg: str) -> None:
    print(f"[bench_rollout] {msg}", flush=True)
