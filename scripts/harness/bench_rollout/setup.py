"""The bench's set-up: data, the W&B endpoint and its recorder, the recipe's config and trace relay as the launcher
sets them, Ray and the LLM stand-ins."""

from __future__ import annotations

import os
import tempfile
from contextlib import ExitStack
from pathlib import Path

from harness.bench_rollout import EXPERIMENT, NO_EGRESS_ENV, PROFILE, log
from harness.bench_rollout.acks import AckRecorder
from recipes.constants import REPO_ROOT
from recipes.trace_relay.names import TRACE_RELAY_ENV, TRACE_RELAY_TOKEN_ENV

# ---- the recipe's config and relay, as the launcher sets them (recipes/launch) ----------------------------------

def bench_knobs(phase: str, args, data_dir: Path, model_dir: Path, out_dir: Path):
    """The launcher's knobs for one arm: `PROFILE=8xh100 TOOL_SET=... DATA_DIR=... MODEL_PATH=<the offline Qwen2.5
    tokenizer; no weights are loaded> EXPERIMENT_NAME=bench_rollout_<arm> OUTPUT_DIR=<the arm's folder>`."""
    from recipes.launch.knobs import Knobs

    return Knobs(profile=PROFILE, data_dir=str(data_dir), tool_set=args.tool_set, model_path=str(model_dir),
                 experiment_name=EXPERIMENT.format(phase=phase), output_dir=str(out_dir))


def compose_bench_config(phase: str, args, data_dir: Path, model_dir: Path, out_dir: Path):
    """The config a launch with the arm's knobs composes (recipes/launch/knobs.py, the launcher's own mapping), at
    the bench's shape, with the arm's changes; and every override that made it."""
    from recipes.launch.knobs import compose_launch_config, launch_overrides

    knobs = bench_knobs(phase, args, data_dir, model_dir, out_dir)
    arms = len(args.arms)  # each arm: its share of the workers, each with the per-worker load of the full step
    shape = [f"data.train_batch_size={args.prompts // arms}", f"actor_rollout_ref.rollout.n={args.n}",
             f"actor_rollout_ref.rollout.agent.num_workers={args.workers // arms}"]
    rollout = "actor_rollout_ref.rollout"
    verl_plain = [f"{rollout}.agent.agent_loop_config_path=null", f"{rollout}.agent.agent_loop_manager_class=null",
                  f"{rollout}.multi_turn.format=hermes"]
    changes = {
        "plain": [*verl_plain, f"{rollout}.trace.backend=null"],
        "verl_weave": verl_plain,
        "recipe_untraced": [f"{rollout}.trace.backend=null"],
        "recipe": [f"{rollout}.trace.max_samples_per_step_per_worker=null"] if args.trace_all else [],
    }[phase]
    overrides = [*shape, *changes]
    return compose_launch_config(knobs, overrides), [*launch_overrides(knobs), *overrides]


def start_trace_relay(knobs, config, upstream: dict[str, str]):
    """This node's relay as a one-node launch starts it (recipes/launch/relays.py: its plan for these knobs, kept
    by a RelayKeeper), sending to `upstream` (the W&B variables the relay reads from the launcher's environment).
    Workers find it through the returned relays' env (TRACE_RELAY_ENV)."""
    from recipes.launch.relays import relay_plan, start_relays

    os.environ.update(upstream)  # the keeper starts (and restarts) the relay with this process's environment
    plan = relay_plan(knobs, config, cluster=False, environ=dict(os.environ))
    if plan is None:
        raise RuntimeError("the recipe's config traces nothing: no relay to measure")
    return plan, start_relays(plan)


# ---- set-up: data, W&B endpoint, recorder, relay, Ray, LLM servers ---------------------------------------------

class Context:
    pass


def prepare_data(args, work_dir: Path) -> Path:
    from data_prep import gsm8k

    out = work_dir / "data"
    rows = min(7473, args.prompts // len(args.arms) * args.steps)
    if gsm8k.main(["--input_dir", str(args.gsm8k_dir), "--local_save_dir", str(out), "--tool_set", args.tool_set,
                   "--train_size", str(rows), "--test_size", "8"]) != 0:
        raise RuntimeError("data prep failed")
    return out


def start_endpoint(stack: ExitStack) -> tuple[str, str, str]:
    """(base URL, trace URL, API key) of the W&B endpoint: WANDB_BASE_URL's when set, else a loopback stand-in."""
    if os.environ.get("WANDB_BASE_URL"):
        base = os.environ["WANDB_BASE_URL"].rstrip("/")
        return base, os.environ.get("WF_TRACE_SERVER_URL", base + "/traces"), os.environ.get("WANDB_API_KEY", "")
    from harness.standins.weave_http_server import API_KEY, loopback_wandb

    wandb = stack.enter_context(loopback_wandb())
    return wandb.url, wandb.url + "/traces", API_KEY


def setup(args, stack: ExitStack) -> Context:
    import ray
    from verl.workers.rollout.router import get_router_handle

    from harness.qwen_tokenizer import build_tiny_qwen2_model_dir, default_cache_dir
    from harness.standins.gsm8k_replay_llm import GSM8KReplayServer
    from harness.standins.weave_http_server import WANDB_LIMITS
    from recipes.trace_relay.http import LoopbackHTTPServer

    ctx = Context()
    ctx.work_dir = Path(args.work_dir or stack.enter_context(tempfile.TemporaryDirectory(prefix="bench_rollout_")))
    ctx.work_dir.mkdir(parents=True, exist_ok=True)
    ctx.data_dir = prepare_data(args, ctx.work_dir)
    ctx.model_dir = build_tiny_qwen2_model_dir(default_cache_dir() / "tiny-qwen2")
    base, trace, key = start_endpoint(stack)
    ctx.recorder = AckRecorder(base, trace)
    recorder_http = LoopbackHTTPServer(ctx.recorder, limits=WANDB_LIMITS).start()
    stack.callback(recorder_http.stop)
    log(f"W&B endpoint {base} ({'WANDB_BASE_URL' if os.environ.get('WANDB_BASE_URL') else 'loopback stand-in'}),"
        f" acknowledgements recorded at {recorder_http.url}")
    config, _ = compose_bench_config("recipe", args, ctx.data_dir, ctx.model_dir, ctx.work_dir)
    relay_knobs = bench_knobs("recipe", args, ctx.data_dir, ctx.model_dir, ctx.work_dir)
    plan, ctx.relays = start_trace_relay(relay_knobs, config, {
        "WANDB_BASE_URL": recorder_http.url, "WF_TRACE_SERVER_URL": recorder_http.url + "/traces",
        "WANDB_API_KEY": key, "WANDB_ERROR_REPORTING": "false"})
    stack.callback(_stop_relay, ctx)
    ctx.spool = Path(plan.spool)
    relay_url = ctx.relays.env[TRACE_RELAY_ENV]
    log(f"trace relay {relay_url} (spool {ctx.spool}, log {plan.log})")
    env = {**NO_EGRESS_ENV, **ctx.relays.env, "PYTHONPATH": str(REPO_ROOT),
           # verl's own weave path (the verl_weave phase) reads these; the recipe's workers set the same from
           # TRACE_RELAY_ENV (recipes/trace_relay/client.py use_trace_relay)
           # (and present the launch's token to the relay as their key)
           "WANDB_BASE_URL": relay_url, "WF_TRACE_SERVER_URL": relay_url + "/traces",
           "WANDB_API_KEY": ctx.relays.env[TRACE_RELAY_TOKEN_ENV]}
    ray_dir = stack.enter_context(tempfile.TemporaryDirectory(prefix="br_ray_", dir="/tmp"))
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"  # read by ray.init here, for the cluster it starts
    ray.init(address="local", num_cpus=args.workers + args.servers + 4, include_dashboard=False,
             log_to_driver=args.verbose, _temp_dir=ray_dir, runtime_env={"env_vars": env})
    stack.callback(ray.shutdown)
    ctx.dataset = train_dataset(config)
    rollout = config.actor_rollout_ref.rollout
    server_class = ray.remote(GSM8KReplayServer)
    ctx.servers = {f"gsm8k-replay-{i}": server_class.options(name=f"gsm8k_replay_{i}").remote(
        str(args.gsm8k_dir / "train.jsonl"), rollout.prompt_length, rollout.response_length,
        rollout.multi_turn.max_assistant_turns, seed=args.seed + i) for i in range(args.servers)}
    ctx.load_balancer = get_router_handle(servers=ctx.servers, router_config_path=None, full_determinism=False,
                                          load_balancer_cls=None)
    return ctx


def _stop_relay(ctx) -> None:
    """Drain and stop the relay as the launcher does at the end of a run; its summary line for the report."""
    ctx.relay_summary = "; ".join(summary.line() for summary in ctx.relays.stop())


def train_dataset(config):
    """verl's trainer's dataset: RLHFDataset over the prepared parquet (prompts too long for the config dropped)."""
    from verl.trainer.ppo.utils import create_rl_dataset
    from verl.utils import hf_tokenizer

    tokenizer = hf_tokenizer(config.actor_rollout_ref.model.path)
    return create_rl_dataset(config.data.train_files, config.data, tokenizer, None)
