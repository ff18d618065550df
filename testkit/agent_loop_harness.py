"""Build and run verl's real agent loop the way verl's AgentLoopWorker does, minus Ray and the LLM server.

The config is verl's own `ppo_trainer` composed by hydra with the recipe's multi-turn overrides, the tools
come from our YAML through verl's loader, the tokenizer is the offline Qwen2.5 one, and the only stand-in
is the LLM server client (testkit.scripted_llm). Runs inside the caller's event loop (the agent loop
captures the running loop when constructed).
"""

from __future__ import annotations

from pathlib import Path

from hydra import compose, initialize_config_module

from recipes.tool_sets import get_tool_set

DEFAULT_OVERRIDES = (
    "actor_rollout_ref.rollout.prompt_length=1024",
    "actor_rollout_ref.rollout.response_length=1024",
    "actor_rollout_ref.rollout.multi_turn.format=hermes",
    "actor_rollout_ref.rollout.multi_turn.max_assistant_turns=5",
    "actor_rollout_ref.rollout.multi_turn.max_tool_response_length=256",
    "data.max_prompt_length=1024",
    "data.max_response_length=1024",
)


def compose_trainer_config(tool_set: str = "calculator", extra_overrides: tuple[str, ...] = ()):
    overrides = [*DEFAULT_OVERRIDES,
                 f"actor_rollout_ref.rollout.multi_turn.tool_config_path={get_tool_set(tool_set).config_path}",
                 *extra_overrides]
    with initialize_config_module(config_module="verl.trainer.config", version_base=None):
        return compose(config_name="ppo_trainer", overrides=overrides)


def load_tools(config) -> list:
    from verl.tools.tool_registry import initialize_tools_from_config

    return initialize_tools_from_config(str(Path(config.actor_rollout_ref.rollout.multi_turn.tool_config_path)))


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
    """The per-sample kwargs verl passes to `run`, from one parquet row (as RLHFDataset would)."""
    extra = row["extra_info"]
    return {"raw_prompt": row["prompt"], "tools_kwargs": extra["tools_kwargs"], "extra_info": extra,
            "index": extra["index"], "data_source": row["data_source"], "reward_model": row["reward_model"],
            "agent_name": row["agent_name"]}


SAMPLING_PARAMS = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "repetition_penalty": 1.0, "logprobs": False}


async def run_rollout(config, tokenizer, server, tools, row: dict, loop_class=None):
    agent_loop = build_agent_loop(config, tokenizer, server, tools, loop_class)
    kwargs = row_kwargs(row)
    kwargs.pop("agent_name")
    return await agent_loop.run(dict(SAMPLING_PARAMS), **kwargs)


def response_text_as_verl_scores_it(tokenizer, output) -> str:
    """What verl's naive reward manager passes as `solution_str`: the response decoded, special tokens skipped."""
    return tokenizer.decode(output.response_ids, skip_special_tokens=True)
