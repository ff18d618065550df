"""Count a run's traced trajectories against what W&B holds: the multi-node smoke's last line.

    python scripts/trace_tally.py --output_dir OUTPUT_DIR --wandb WANDB_BASE_URL [--nodes 2] [--entity E]
                                  [--experiment E] [--save FILE]   # also keep what W&B said, to count again later
    python scripts/trace_tally.py --output_dir OUTPUT_DIR --received FILE [--nodes 2]

traced: the trajectories the agent-loop workers traced, from the run's own record: its composed config (hydra's
copy in OUTPUT_DIR/hydra/) and its dumps (one line per trajectory of each generate call, rollouts/ and validation/):
each worker gets an equal share of a call's prompts and traces its share of the step's groups (recipes/tracing/
volume.py: verl's max_samples_per_step_per_worker, or the launcher's trace budget in turn), all their samples.
acknowledged: those whose whole trace W&B holds (one root, every call ended, none missing its parent), read through
weave's public call query (what the Weave UI and `client.get_calls` read: scripts/harness/held_calls.py), so the
count holds against any W&B; the entity is --entity, WANDB_ENTITY or the key's default. duplicates: trajectories
with a call W&B received more than once, known only where the endpoint is the project's W&B stand-in (its own
`/standin/received`); elsewhere `n/a`. threads: the GRPO groups W&B holds as threads, and how many hold all n
rollouts. The relays' replacements and bytes: OUTPUT_DIR/trace_relays.json (written by the launcher, per node).

Last line: RESULT nodes=<n> traced=<t> acknowledged=<a> lost_traces=<t-a> duplicate_traces=<d> relays_replaced=<r>
threads=<g> whole_threads=<w> trace_bytes_per_trajectory=<relay bytes sent / a>
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections import Counter
from pathlib import Path

import yaml

from recipes.tracing.volume import TraceShape, groups_on_worker

ROOT_OP = "AgentLoop.run"  # the trajectory's root call: ScoredToolAgentLoop.run (tracing/shaping.py ROOT_OP_SUFFIX)


def op_name(call: dict) -> str:
    """`ScoredToolAgentLoop.run` from weave's op ref `weave:///<entity>/<project>/op/ScoredToolAgentLoop.run:<digest>`."""
    return str(call["op_name"]).rsplit("/op/", 1)[-1].split(":")[0]


def run_config(output_dir: Path) -> dict:
    configs = sorted((output_dir / "hydra").glob("*/.hydra/config.yaml"))
    if not configs:
        raise FileNotFoundError(f"no hydra config under {output_dir}/hydra: did main_ppo run?")
    return yaml.safe_load(configs[-1].read_text())


def traced_per_call(shape: TraceShape, prompts_per_worker: int, step: int) -> int:
    """Prompts all agent-loop workers trace in one generate call of `prompts_per_worker` prompts each."""
    if shape.groups is not None:
        shares = [groups_on_worker(slot, shape.workers, shape.groups, step) for slot in range(shape.workers)]
    else:
        shares = [prompts_per_worker if shape.per_worker is None else shape.per_worker] * shape.workers
    return sum(min(share, prompts_per_worker) for share in shares)


def expected_traces(output_dir: Path, config: dict | None = None) -> int:
    config = config or run_config(output_dir)
    rollout = config["actor_rollout_ref"]["rollout"]
    if rollout["trace"]["backend"] != "weave":
        return 0
    shape = TraceShape.of(config)
    total = 0
    for folder, n in (("rollouts", shape.n), ("validation", shape.val_n)):
        for dump in sorted((output_dir / folder).glob("*.jsonl")):
            samples = sum(1 for line in dump.read_text().splitlines() if line.strip())
            total += traced_per_call(shape, samples // n // shape.workers, int(dump.stem)) * n
    return total


def tally(calls: list[dict], starts: dict[str, int] | None, experiment: str | None) -> tuple[int, int | None, Counter]:
    """(trajectories held whole, trajectories with a call received twice or None when unknown, whole roots per
    thread)."""
    by_trace: dict[str, list[dict]] = {}
    for call in calls:
        by_trace.setdefault(call["trace_id"], []).append(call)
    whole, twice, threads = 0, 0, Counter()
    for trace in by_trace.values():
        roots = [c for c in trace if c["parent_id"] is None and op_name(c).endswith(ROOT_OP)]
        if len(roots) != 1:
            continue
        if experiment and (roots[0].get("attributes") or {}).get("experiment_name") not in (None, experiment):
            continue
        ids = {c["id"] for c in trace}
        if all(c["ended"] for c in trace) and all(c["parent_id"] in ids for c in trace if c["parent_id"]):
            whole += 1
            if roots[0].get("thread_id"):
                threads[roots[0]["thread_id"]] += 1
        twice += starts is not None and any(starts.get(c["id"], 1) > 1 for c in trace)
    return whole, (twice if starts is not None else None), threads


def ask_wandb(args, config: dict) -> dict:
    """What the endpoint holds of this run: its calls (public query) and, from the stand-in only, the repeats."""
    from harness import held_calls

    trace_url = os.environ.get("WF_TRACE_SERVER_URL") if os.environ.get("WANDB_BASE_URL") == args.wandb else None
    entity = args.entity or os.environ.get("WANDB_ENTITY") or held_calls.default_entity(args.wandb)
    client = held_calls.weave_reader(args.wandb, trace_url, entity, config["trainer"]["project_name"])
    experiment = args.experiment or config["trainer"]["experiment_name"]
    return {"calls": held_calls.held_calls(client, experiment), "starts_received": held_calls.repeats(args.wandb)}


def relays(output_dir: Path) -> list[dict]:
    path = output_dir / "trace_relays.json"
    return json.loads(path.read_text())["nodes"] if path.is_file() else []


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--output_dir", type=Path, required=True)
    p.add_argument("--wandb", default=os.environ.get("WANDB_BASE_URL"), help="W&B's base URL")
    p.add_argument("--entity", help="the W&B entity the traces went to (default: WANDB_ENTITY, else the key's own)")
    p.add_argument("--nodes", type=int, default=1)
    p.add_argument("--experiment", help="count this experiment's trajectories (default: the run's own)")
    p.add_argument("--save", type=Path, help="write what W&B said here (JSON)")
    p.add_argument("--received", type=Path, help="count from a file --save wrote instead of asking W&B")
    args = p.parse_args(argv)
    try:
        config = run_config(args.output_dir)
        traced = expected_traces(args.output_dir, config)
        if not args.received and not args.wandb:
            raise ValueError("no W&B to ask: pass --wandb (or set WANDB_BASE_URL), or --received FILE")
        got = json.loads(args.received.read_text()) if args.received else ask_wandb(args, config)
        if args.save:
            args.save.write_text(json.dumps(got))
    except (OSError, ValueError, KeyError) as err:
        print(f"error: {type(err).__name__}: {err}", file=sys.stderr)
        return 1
    whole, twice, threads = tally(got["calls"], got.get("starts_received"), args.experiment)
    nodes = relays(args.output_dir)
    for node in nodes:
        print(f"[tally] node {node['node']}: its relay sent {node['sent']} trace records "
              f"({node.get('sent_bytes', 0)} bytes), {node['pending']} pending, replaced {node['replaced']} time(s) "
              f"({node['hangs']} for not answering)", file=sys.stderr)
    n = TraceShape.of(config).n
    whole_threads = sum(count == n for count in threads.values())
    sent = sum(node.get("sent_bytes", 0) for node in nodes)
    print(f"[tally] {len(threads)} GRPO group(s) held as Weave threads, {whole_threads} with all {n} rollouts; "
          f"roots per thread: {sorted(Counter(threads.values()).items())}", file=sys.stderr)
    print(f"RESULT nodes={args.nodes} traced={traced} acknowledged={whole} lost_traces={traced - whole} "
          f"duplicate_traces={'n/a' if twice is None else twice} relays_replaced={sum(x['replaced'] for x in nodes)} "
          f"threads={len(threads)} whole_threads={whole_threads} "
          f"trace_bytes_per_trajectory={round(sent / whole) if whole and sent else 'n/a'}", flush=True)
    return 0 if whole == traced and not twice and whole_threads == len(threads) else 1


if __name__ == "__main__":
    sys.exit(main())
