"""Count a run's traced trajectories against what W&B received: the multi-node smoke's last line.

    python scripts/trace_tally.py --output_dir OUTPUT_DIR --wandb WANDB_BASE_URL [--nodes 2] [--experiment E]
                                  [--save FILE]          # also keep what the stand-in said, to count again later
    python scripts/trace_tally.py --output_dir OUTPUT_DIR --received FILE [--nodes 2]

traced: the trajectories the agent-loop workers traced, from the run's own record: its composed config (hydra's
copy in OUTPUT_DIR/hydra/) and its dumps (one line per trajectory of each generate call, rollouts/ and validation/):
each worker gets an equal share of a call's prompts and traces up to max_samples_per_step_per_worker of them, all
their samples (verl's AgentLoopWorker). acknowledged: those whose whole trace W&B holds (the root ended, every call
under it ended, no call missing its parent). duplicates: trajectories with a call W&B received more than once, read
from the W&B stand-in's own `/standin/received` (another W&B keeps one copy per call id and cannot say). The relays'
replacements: OUTPUT_DIR/trace_relays.json (written by the launcher, per node).

Last line: RESULT nodes=<n> traced=<t> acknowledged=<a> lost_traces=<t-a> duplicate_traces=<d> relays_replaced=<r>
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import urllib.request
from pathlib import Path

import yaml

ROOT_OP = "AgentLoop.run"  # the trajectory's root call: ScoredToolAgentLoop.run (tracing/shaping.py ROOT_OP_SUFFIX)


def op_name(call: dict) -> str:
    """`ScoredToolAgentLoop.run` from weave's op ref `weave:///<entity>/<project>/op/ScoredToolAgentLoop.run:<digest>`."""
    return str(call["op_name"]).rsplit("/op/", 1)[-1].split(":")[0]


def expected_traces(output_dir: Path) -> int:
    configs = sorted((output_dir / "hydra").glob("*/.hydra/config.yaml"))
    if not configs:
        raise FileNotFoundError(f"no hydra config under {output_dir}/hydra: did main_ppo run?")
    config = yaml.safe_load(configs[-1].read_text())
    rollout = config["actor_rollout_ref"]["rollout"]
    if rollout["trace"]["backend"] != "weave":
        return 0
    workers, most = rollout["agent"]["num_workers"], rollout["trace"]["max_samples_per_step_per_worker"]
    total = 0
    for folder, n in (("rollouts", rollout["n"]), ("validation", rollout["val_kwargs"]["n"])):
        for dump in sorted((output_dir / folder).glob("*.jsonl")):
            samples = sum(1 for line in dump.read_text().splitlines() if line.strip())
            prompts_per_worker = samples // n // workers
            total += workers * (prompts_per_worker if most is None else min(most, prompts_per_worker)) * n
    return total


def received(wandb_url: str) -> dict:
    with urllib.request.urlopen(wandb_url.rstrip("/") + "/standin/received", timeout=60) as answer:
        return json.load(answer)


def tally(calls: list[dict], starts: dict[str, int], experiment: str | None) -> tuple[int, int]:
    """(trajectories received whole, trajectories with a call received twice)."""
    by_trace: dict[str, list[dict]] = {}
    for call in calls:
        by_trace.setdefault(call["trace_id"], []).append(call)
    whole = twice = 0
    for trace in by_trace.values():
        roots = [c for c in trace if c["parent_id"] is None and op_name(c).endswith(ROOT_OP)]
        if len(roots) != 1:
            continue
        if experiment and (roots[0].get("attributes") or {}).get("experiment_name") not in (None, experiment):
            continue
        ids = {c["id"] for c in trace}
        whole += all(c["ended"] for c in trace) and all(c["parent_id"] in ids for c in trace if c["parent_id"])
        twice += any(starts.get(c["id"], 1) > 1 for c in trace)
    return whole, twice


def relays_replaced(output_dir: Path) -> tuple[int, list[dict]]:
    path = output_dir / "trace_relays.json"
    nodes = json.loads(path.read_text())["nodes"] if path.is_file() else []
    return sum(node["replaced"] for node in nodes), nodes


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--output_dir", type=Path, required=True)
    p.add_argument("--wandb", default=os.environ.get("WANDB_BASE_URL"), help="W&B's base URL (the stand-in's)")
    p.add_argument("--nodes", type=int, default=1)
    p.add_argument("--experiment", help="count only trajectories of this experiment (a W&B that holds others)")
    p.add_argument("--save", type=Path, help="write what the stand-in received here (JSON)")
    p.add_argument("--received", type=Path, help="count from a file --save wrote instead of asking W&B")
    args = p.parse_args(argv)
    try:
        traced = expected_traces(args.output_dir)
        got = json.loads(args.received.read_text()) if args.received else received(args.wandb)
        if args.save:
            args.save.write_text(json.dumps(got))
    except (OSError, ValueError, KeyError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    whole, twice = tally(got["calls"], got["starts_received"], args.experiment)
    replaced, nodes = relays_replaced(args.output_dir)
    for node in nodes:
        print(f"[tally] node {node['node']}: its relay sent {node['sent']} trace records, {node['pending']} "
              f"pending, replaced {node['replaced']} time(s) ({node['hangs']} for not answering)", file=sys.stderr)
    print(f"RESULT nodes={args.nodes} traced={traced} acknowledged={whole} lost_traces={traced - whole} "
          f"duplicate_traces={twice} relays_replaced={replaced}", flush=True)
    return 0 if whole == traced and not twice else 1


if __name__ == "__main__":
    sys.exit(main())
