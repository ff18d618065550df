"""scripts/trace_tally.py, the multi-node smoke's count: how many trajectories the workers traced (from the run's
config and dumps, as verl samples them per agent-loop worker), how many W&B holds whole, and how many it received
twice. What W&B received is written here in the W&B stand-in's own shape (`/standin/received`, op names as weave
refs), so the count can be checked against a known answer."""

from __future__ import annotations

import json

import pytest
import yaml

ENTITY_PROJECT = "weave:///loopback-entity/gsm8k_tool_grpo/op"


@pytest.fixture(scope="module")
def tally():
    from recipes.harness import trace_tally

    return trace_tally


def output_dir(tmp_path, max_samples: int | None):
    """A run of 2 agent-loop workers: one training step of 2 prompts x 2 samples, one validation of 4 prompts."""
    config = {"actor_rollout_ref": {"rollout": {
        "n": 2, "val_kwargs": {"n": 1}, "agent": {"num_workers": 2},
        "trace": {"backend": "weave", "max_samples_per_step_per_worker": max_samples}}}}
    (tmp_path / "hydra" / "t" / ".hydra").mkdir(parents=True)
    (tmp_path / "hydra" / "t" / ".hydra" / "config.yaml").write_text(yaml.safe_dump(config))
    for folder, name, lines in (("rollouts", "1.jsonl", 4), ("validation", "0.jsonl", 4)):
        (tmp_path / folder).mkdir(exist_ok=True)
        (tmp_path / folder / name).write_text("".join(json.dumps({"i": i}) + "\n" for i in range(lines)))
    return tmp_path


def trajectory(number: int, child_ended: bool = True) -> list[dict]:
    root = {"id": f"r{number}", "parent_id": None, "trace_id": f"t{number}",
            "op_name": f"{ENTITY_PROJECT}/ScoredToolAgentLoop.run:abc", "attributes": {}, "ended": True}
    child = {"id": f"c{number}", "parent_id": f"r{number}", "trace_id": f"t{number}",
             "op_name": f"{ENTITY_PROJECT}/LLMServerClient.generate:def", "attributes": {}, "ended": child_ended}
    return [root, child]


@pytest.mark.parametrize("max_samples, expected", [(2, 8), (1, 6), (None, 8)])
def test_the_traced_count_follows_verls_sampling_per_worker(tally, tmp_path, max_samples, expected):
    # training: 1 prompt per worker, all its samples; validation: 2 prompts per worker, up to max_samples of them
    assert tally.expected_traces(output_dir(tmp_path, max_samples)) == expected


def test_a_trajectory_counts_when_whole_and_a_repeat_is_counted(tally, tmp_path, capsys):
    calls = [c for n in range(7) for c in trajectory(n)] + trajectory(7, child_ended=False)
    starts = {c["id"]: 1 for c in calls} | {"c3": 2}  # a call of trajectory 3 arrived twice
    received = tmp_path / "received.json"
    received.write_text(json.dumps({"calls": calls, "starts_received": starts}))
    out = output_dir(tmp_path / "run", 2)
    (out / "trace_relays.json").write_text(json.dumps({"nodes": [
        {"node": "a", "sent": 9, "pending": 0, "replaced": 1, "hangs": 0},
        {"node": "b", "sent": 8, "pending": 0, "replaced": 1, "hangs": 1}]}))
    assert tally.main(["--output_dir", str(out), "--received", str(received), "--nodes", "2"]) == 1
    assert capsys.readouterr().out.splitlines()[-1] == (
        "RESULT nodes=2 traced=8 acknowledged=7 lost_traces=1 duplicate_traces=1 relays_replaced=2")
