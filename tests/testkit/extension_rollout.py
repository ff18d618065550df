"""Run by tests/test_extending.py in a copy of the repo (its root first on PYTHONPATH, so that copy's recipes,
tools, data_prep and config are the ones imported), in one process to pay verl's import once: a data prep command
run as `python <script> <args>` runs it; then one rollout of verl's real ToolAgentLoop, in this process, as the
recipe's agent loop (the reward scored in the loop), on the first row of the prepared test file, a scripted LLM
writing the given turns; then what the test checks, as one JSON object on the last line of stdout.

    python -m testkit.extension_rollout --prepare '["data_prep/x.py", "--local_save_dir", "D"]' \
        --data_file D/test.parquet --tool_set S --turns '["<tool_call>...", "#### 150"]' \
        [--score '[data_source, text, ground_truth]' ...]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import runpy
import sys


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--prepare", help="a data prep command, a JSON list: the script, then its arguments")
    p.add_argument("--data_file", required=True)
    p.add_argument("--tool_set", required=True)
    p.add_argument("--turns", required=True, help="the model's turns, a JSON list of strings")
    p.add_argument("--score", action="append", default=[], metavar="JSON",
                   help="[data_source, text, ground_truth] for the reward to score besides the rollout (its acc, or "
                        "the last line of the error it raises); repeatable")
    args = p.parse_args(argv)
    if args.prepare:
        script, *script_args = json.loads(args.prepare)
        sys.argv = [script, *script_args]
        try:
            runpy.run_path(script, run_name="__main__")
        except SystemExit as done:
            if done.code not in (None, 0):
                raise

    import pyarrow.parquet as pq

    from harness import agent_loop_inprocess as harness
    from harness.qwen_tokenizer import load_qwen25_tokenizer
    from harness.standins.scripted_llm import ScriptedLLM
    from recipes.constants import REPO_ROOT
    from recipes.gsm8k.agent_loop import REWARD_EXTRA_INFO, ScoredToolAgentLoop
    from recipes.gsm8k.reward import compute_score
    from recipes.gsm8k.reward_keys import ACC, ACC_STRICT, PRED, TOOL_CALLS
    from recipes.gsm8k.tool_sets import TOOL_SETS
    from recipes.gsm8k.trajectory import count_tool_calls, model_text, split_turns

    turns = json.loads(args.turns)
    row = pq.read_table(args.data_file).slice(0, 1).to_pylist()[0]
    tok = load_qwen25_tokenizer()
    config = harness.compose_trainer_config(args.tool_set)
    tools = harness.load_tools(config)
    server = ScriptedLLM(tok, lambda prompt: turns)
    output = asyncio.run(harness.run_rollout(config, tok, server, tools, row, ScoredToolAgentLoop))
    runs = split_turns(output.response_ids, output.response_mask, lambda ids: tok.decode(ids, skip_special_tokens=True))
    extra = output.extra_fields[REWARD_EXTRA_INFO]
    result = {
        "repo_root": str(REPO_ROOT),
        "tool_config": str(config.actor_rollout_ref.rollout.multi_turn.tool_config_path),
        "tools": [tool.name for tool in tools],
        "tool_kind": type(tools[0]).__name__ if tools else None,
        "tool_turns": [text for by_model, text in runs if not by_model],
        "reward_score": output.reward_score,
        "reward": {key: extra[key] for key in (ACC, ACC_STRICT, TOOL_CALLS, PRED)},
        "calls_counted_without_the_row": list(count_tool_calls(model_text(runs))),
        "scores": [_score(compute_score, json.loads(item)) for item in args.score],
        "tool_sets": {name: list(tool_set.tools) for name, tool_set in TOOL_SETS.items()},
    }
    json.dump(result, sys.stdout, default=str)
    return 0


def _score(compute_score, inputs: list) -> float | str:
    from recipes.gsm8k.reward_keys import ACC

    try:
        return compute_score(*inputs)[ACC]
    except ValueError as err:
        return f"{type(err).__name__}: {err}"


if __name__ == "__main__":
    sys.exit(main())
