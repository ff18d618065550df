"""verl's real agent loop in this process, built the way verl's AgentLoopWorker builds it, without Ray.

For what needs trajectories but no trainer: the CPU learning check's quick scorer
(scripts/harness/learning/evaluate.py),
the benchmarks (scripts/bench_*.py) and the tests. The config is the recipe's own (config/gsm8k_multiturn_grpo.yaml
over verl's ppo_trainer, composed by the preflight's composer with the paths the launcher sets), so a change to
the recipe's YAML reaches every caller; the tools come from our YAML through verl's loader. The caller brings the
tokenizer and the LLM server client (the CPU rollout server, or a stand-in from scripts/harness/standins/). Runs inside
the caller's event loop (the agent loop captures the running loop when constructed).
"""

from __future__ import annotations

import recipes.gsm8k.tool_parser  # noqa: F401  the recipe's tool-call format, registered as the agent loop registers it
from recipes.launch.knobs import Knobs, compose_launch_config


def compose_trainer_config(tool_set: str = "calculator", extra_overrides: tuple[str, ...] = (), **knobs: str):
    """The recipe's config as a launch with these knobs composes it (recipes/launch/knobs.py: tool config, agent
    loops and reward at their real paths; PROFILE=8xh100 unless a `profile` knob says otherwise)."""
    return compose_launch_config(Knobs(tool_set=tool_set, **knobs), extra_overrides)


def load_tools(config) -> list:
    """The run's tools as verl's agent-loop worker loads them: the tool config's classes, the function file's
    functions."""
    from verl.tools.tool_registry import load_all_tools

    multi_turn = config.actor_rollout_ref.rollout.multi_turn
    return load_all_tools(tool_config_path=multi_turn.tool_config_path,
                          function_tool_path=multi_turn.get("function_tool_path"))


def build_agent_loop(config, tokenizer, server, tools, loop_class=None):
    """One agent loop instance (verl builds one per trajectory)."""
    from verl.experimental.agent_loop.agent_loop import DictConfigWrap, ToolListWrap
    from verl.experimental.agent_loop.tool_agent_loop import ToolAgentLoop
    from verl.utils.dataset.rl_dataset import RLHFDataset

    return (loop_class or ToolAgentLoop)(
        trainer_config=DictConfigWrap(config),
        server_manager=server,
        tokenizer=tokenizer,
        processor=None,
        dataset_cls=RLHFDataset,
        data_config=DictConfigWrap(config.data),
        hf_model_type="qwen2",
        tools=ToolListWrap(tools),
    )


def row_kwargs(row: dict) -> dict:
    """The per-sample kwargs verl passes to `run`, from one parquet row (as RLHFDataset would: a row without tools
    has no tools_kwargs)."""
    extra = row["extra_info"]
    return {"raw_prompt": row["prompt"], "tools_kwargs": extra.get("tools_kwargs", {}), "extra_info": extra,
            "index": extra["index"], "data_source": row["data_source"], "reward_model": row["reward_model"],
            "agent_name": row["agent_name"]}


SAMPLING_PARAMS = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "repetition_penalty": 1.0, "logprobs": False}


async def run_rollout(config, tokenizer, server, tools, row: dict, loop_class=None):
    agent_loop = build_agent_loop(config, tokenizer, server, tools, loop_class)
    kwargs = row_kwargs(row)
    kwargs.pop("agent_name")
    return await agent_loop.run(dict(SAMPLING_PARAMS), **kwargs)
