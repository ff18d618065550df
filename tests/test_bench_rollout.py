"""scripts/bench_rollout.py --quick, its CI shape (2 steps x 8 prompts x 4 rollouts on 2 agent-loop workers): verl's
real agent-loop manager and workers in a real Ray cluster, the recipe's config for PROFILE=8xh100, its tools, parser,
reward, tracing and trace relay, against the GSM8K replay LLM stand-in (scripts/harness/standins/gsm8k_replay_llm.py).
W&B is this test's own loopback stand-in, given to the bench in WANDB_BASE_URL. Every trajectory comes back, and every
call the workers traced reaches W&B exactly once. A benchmark's own check: `bash scripts/run_tests.sh -m bench`, not
in the suite. The stand-in's own rules (turns from GSM8K's solutions, the kinds of trajectory) and the bench's leak
slope: tests/test_replay_llm.py."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from harness.standins.gsm8k_replay_llm import KINDS
from harness.standins.weave_http_server import API_KEY, loopback_wandb
from recipes.constants import REPO_ROOT

pytestmark = [pytest.mark.bench, pytest.mark.timeout(600)]

TRAJECTORIES, TRACED = 2 * 8 * 4, 2 * 2 * 1 * 4  # steps x prompts x n; steps x workers x 1 prompt (the config's) x n


@pytest.fixture(scope="module")
def bench(shared_gsm8k_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("bench_rollout")
    with loopback_wandb() as wandb:
        env = {**os.environ, **wandb.env, "WANDB_API_KEY": API_KEY}
        proc = subprocess.run([sys.executable, str(REPO_ROOT / "scripts" / "bench_rollout.py"), "--quick",
                               "--gsm8k-dir", str(shared_gsm8k_dir), "--json", str(out / "figures.json")],
                              env=env, capture_output=True, text=True, timeout=540, cwd=out)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        calls = wandb.storage.recorded_calls()
        starts = dict(wandb.app.call_starts_received)
        received = dict(wandb.app.write_bytes)
    result = dict(re.findall(r"(\w+)=(\S+)", proc.stdout.strip().splitlines()[-1]))
    return {"result": result, "stdout": proc.stdout, "calls": calls, "starts": starts, "out": out,
            "received_bytes": received, "figures": json.loads((out / "figures.json").read_text())}


def test_every_trajectory_and_every_traced_call_is_accounted_for(bench):
    result, recipe = bench["result"], bench["figures"]["results"]["recipe"]
    assert bench["stdout"].strip().splitlines()[-1].startswith("RESULT ")
    assert (result["trajectories"], result["steps"], result["traced"]) == (str(TRAJECTORIES), "2", str(TRACED))
    assert (result["acknowledged"], result["lost_traces"], result["duplicate_traces"]) == (str(TRACED), "0", "0")
    assert [s["trajectories"] for s in recipe["steps"]] == [TRAJECTORIES // 2] * 2
    assert [sum(s["expected_traced"]) for s in recipe["steps"]] == [TRACED // 2] * 2
    # what W&B (this test's stand-in) holds: each traced trajectory once, with every call its worker finished
    mine = [c for c in bench["calls"] if (c["attributes"] or {}).get("experiment_name") == "bench_rollout_recipe"]
    roots = [c for c in mine if c["parent_id"] is None]
    assert len({(r["attributes"]["step"], r["attributes"]["sample_index"], r["attributes"]["rollout_n"])
                for r in roots}) == len(roots) == TRACED
    assert len(mine) == sum(recipe["made_calls"].values()) and all(c["ended"] for c in mine)
    assert set(bench["starts"].values()) == {1}


def test_each_traced_group_is_a_thread_with_its_figures_and_the_bytes_are_what_wandb_received(bench):
    """Every traced group a thread of its n roots, each with its reward, the group's mean and an advantage; the
    bytes the bench counts per traced call (as weave encodes it) add up to the bodies W&B received, less their
    framing, and make the per-trajectory figure (by the model's turns too)."""
    mine = [c for c in bench["calls"] if (c["attributes"] or {}).get("experiment_name") == "bench_rollout_recipe"]
    threads: dict[str, list[dict]] = {}
    for root in (c for c in mine if c["parent_id"] is None):
        threads.setdefault(root["thread_id"], []).append(root)
    assert None not in threads and len(threads) == TRACED // 4 and {len(m) for m in threads.values()} == {4}
    for members in threads.values():
        assert all(list(m["output"])[:5] == ["reward", "advantage", "group_mean", "group_std", "group_size"]
                   for m in members)
        assert sum(m["output"]["advantage"] for m in members) == pytest.approx(0, abs=1e-5)
    trace = bench["figures"]["figures"]["recipe"]["trace"]
    counted = sum(step["bytes"] for step in trace["per_step"].values())
    assert 0.99 * bench["received_bytes"]["calls/complete"] <= counted <= bench["received_bytes"]["calls/complete"]
    assert float(bench["result"]["trace_bytes_per_trajectory"]) == pytest.approx(counted / TRACED, rel=1e-3)
    assert len(bench["result"]["trace_bytes_by_turns"].split(",")) == 5
    assert float(bench["result"]["trace_gb_per_day"]) > float(bench["result"]["trace_mb_per_step"]) / 1e3


def test_the_run_is_the_recipes_as_the_launcher_composes_it(bench, launcher_overrides):
    recipe = bench["figures"]["results"]["recipe"]
    stdout = bench["stdout"]
    assert "TracedAgentLoopManager, agent loop recipe, parser hermes_with_feedback, trace weave" in stdout
    # the launcher's overrides for PROFILE=8xh100, every one (recipes/launch/knobs.py's launch_overrides)
    launcher_keys = {o.split("=", 1)[0] for o in launcher_overrides}
    assert launcher_keys <= {o.split("=", 1)[0] for o in recipe["overrides"]}
    assert "profile=8xh100" in recipe["overrides"]


def test_every_kind_of_trajectory_ran(bench):
    stand_in = re.search(r"LLM stand-in: (\{.*\})", bench["stdout"]).group(1)
    for kind in {kind for _, kind in KINDS}:
        assert f"'kind_{kind}'" in stand_in, stand_in
    assert "'cut_by_length'" in stand_in and "unknown_question" not in stand_in
    outcomes = [s["outcomes"] for s in bench["figures"]["results"]["recipe"]["steps"]]
    assert all(0 < o["correct"] < 1 and o["bad_call"] > 0 and o["at_length_limit"] > 0 for o in outcomes)
