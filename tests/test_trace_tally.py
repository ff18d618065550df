"""scripts/trace_tally.py, the multi-node smoke's count: how many trajectories the workers traced (from the run's
config and dumps, as verl samples them per agent-loop worker, or in turn under the launcher's budget), how many W&B
holds whole, read through weave's public call query as from any W&B, and how many it received twice (only the
project's stand-in can say). What W&B holds is made here by the real weave client, over HTTP, one trajectory broken
on purpose, so the count can be checked against a known answer."""

from __future__ import annotations

import json

import pytest
import yaml

from harness.standins.weave_http_server import loopback_wandb

pytestmark = pytest.mark.integration

ENTITY_PROJECT = "weave:///loopback-entity/gsm8k_tool_grpo/op"
PROJECT, EXPERIMENT = "tally-test", "tally-run"


@pytest.fixture(scope="module")
def tally():
    import trace_tally

    return trace_tally


def output_dir(tmp_path, max_samples: int | None, groups: int | None = None, val_lines: int = 4):
    """A run of 2 agent-loop workers: one training step of 2 prompts x 2 samples, one validation of 4 prompts."""
    config = {"data": {"train_batch_size": 2}, "trainer": {"test_freq": 2, "project_name": PROJECT,
                                                           "experiment_name": EXPERIMENT},
              "actor_rollout_ref": {"rollout": {
                  "n": 2, "val_kwargs": {"n": 1}, "agent": {"num_workers": 2},
                  "trace": {"backend": "weave", "max_samples_per_step_per_worker": max_samples}}}}
    if groups is not None:
        config["recipe"] = {"trace_groups_per_step": groups}
    (tmp_path / "hydra" / "t" / ".hydra").mkdir(parents=True)
    (tmp_path / "hydra" / "t" / ".hydra" / "config.yaml").write_text(yaml.safe_dump(config))
    for folder, name, lines in (("rollouts", "1.jsonl", 4), ("validation", "0.jsonl", val_lines)):
        (tmp_path / folder).mkdir(exist_ok=True)
        (tmp_path / folder / name).write_text("".join(json.dumps({"i": i}) + "\n" for i in range(lines)))
    return tmp_path


@pytest.mark.parametrize("max_samples, groups, expected", [(2, None, 8), (1, None, 6), (None, None, 8), (1, 1, 3)])
def test_the_traced_count_follows_verls_sampling_per_worker_or_the_budgets_turns(tally, tmp_path, max_samples,
                                                                                  groups, expected):
    # training: 1 prompt per worker, all its samples; validation: 2 prompts per worker, up to max_samples of them;
    # the budget's 1 group a step: one worker's 1 prompt at step 1 (2 samples), one worker's at step 0 (1 sample)
    assert tally.expected_traces(output_dir(tmp_path, max_samples, groups)) == expected


def trajectory(number: int, child_ended: bool = True) -> list[dict]:
    root = {"id": f"r{number}", "parent_id": None, "trace_id": f"t{number}", "thread_id": f"g{number // 2}",
            "op_name": f"{ENTITY_PROJECT}/ScoredToolAgentLoop.run:abc", "attributes": {}, "ended": True}
    child = {"id": f"c{number}", "parent_id": f"r{number}", "trace_id": f"t{number}", "thread_id": f"g{number // 2}",
             "op_name": f"{ENTITY_PROJECT}/LLMServerClient.generate:def", "attributes": {}, "ended": child_ended}
    return [root, child]


def test_a_trajectory_counts_when_whole_and_a_repeat_is_counted(tally, tmp_path, capsys):
    calls = [c for n in range(7) for c in trajectory(n)] + trajectory(7, child_ended=False)
    starts = {c["id"]: 1 for c in calls} | {"c3": 2}  # a call of trajectory 3 arrived twice
    received = tmp_path / "received.json"
    received.write_text(json.dumps({"calls": calls, "starts_received": starts}))
    out = output_dir(tmp_path / "run", 2)
    (out / "trace_relays.json").write_text(json.dumps({"nodes": [
        {"node": "a", "sent": 9, "pending": 0, "replaced": 1, "hangs": 0, "sent_bytes": 70_000},
        {"node": "b", "sent": 8, "pending": 0, "replaced": 1, "hangs": 1, "sent_bytes": 70_000}]}))
    assert tally.main(["--output_dir", str(out), "--received", str(received), "--nodes", "2"]) == 1
    assert capsys.readouterr().out.splitlines()[-1] == (
        "RESULT nodes=2 traced=8 acknowledged=7 lost_traces=1 duplicate_traces=1 relays_replaced=2 threads=4 "
        "whole_threads=3 trace_bytes_per_trajectory=20000")


@pytest.fixture(scope="module")
def held(tmp_path_factory):
    """A W&B stand-in holding 4 traced trajectories of the run (2 GRPO threads of 2) sent by the real weave client,
    the root of the last one lost on W&B's side (its child is there alone), and one call of another experiment."""
    import os

    import weave
    from weave.trace.context import weave_client_context

    with pytest.MonkeyPatch.context() as env, loopback_wandb() as wandb:
        for name, value in wandb.env.items():
            env.setenv(name, value)
        weave_client_context.set_weave_client_global(None)
        client = weave.init(PROJECT)
        try:
            roots = []
            for number in range(4):
                with weave.thread(f"{EXPERIMENT}/train/step1/prompt{number // 2}"):
                    attributes = {"experiment_name": EXPERIMENT, "step": 1, "rollout_n": number % 2}
                    root = client.create_call(op="ScoredToolAgentLoop.run", inputs={}, attributes=attributes)
                    child = client.create_call(op="LLMServerClient.generate", inputs={}, parent=root,
                                               attributes=attributes)
                    client.finish_call(child, output={"text": "24"})
                    client.finish_call(root, output={"reward": 1.0})
                    roots.append(root.id)
            other = client.create_call(op="ScoredToolAgentLoop.run", inputs={},
                                       attributes={"experiment_name": "another run"})
            client.finish_call(other, output={})
            client.flush()
        finally:
            weave_client_context.set_weave_client_global(None)
        for kept in (wandb.storage.starts, wandb.storage.ends):
            kept.pop(roots[-1])
        yield {"url": wandb.url, "app": wandb.app, "entity": wandb.entity, "env": dict(os.environ)}


def test_through_the_public_query_of_any_wandb(tally, held, tmp_path, capsys, monkeypatch):
    """The project's stand-in also says what arrived twice; another W&B (here the stand-in without its own route)
    cannot, and the count of what it holds is the same."""
    out = output_dir(tmp_path, 1, val_lines=0)  # 2 workers x 1 prompt x 2 samples: 4 traced
    monkeypatch.delenv("WF_TRACE_SERVER_URL", raising=False)
    args = ["--output_dir", str(out), "--wandb", held["url"], "--entity", held["entity"], "--save", str(tmp_path / "s")]
    assert tally.main(args) == 1  # one trajectory lost
    assert capsys.readouterr().out.splitlines()[-1].startswith(
        "RESULT nodes=1 traced=4 acknowledged=3 lost_traces=1 duplicate_traces=0 relays_replaced=0 threads=2 "
        "whole_threads=1 ")
    held["app"].serves_received = False
    try:
        assert tally.main(args) == 1
    finally:
        held["app"].serves_received = True
    assert "acknowledged=3 lost_traces=1 duplicate_traces=n/a " in capsys.readouterr().out.splitlines()[-1]
    saved = json.loads((tmp_path / "s").read_text())  # counted again later from the file, as from W&B
    assert len(saved["calls"]) == 7 and saved["starts_received"] is None
