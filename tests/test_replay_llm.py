"""The GSM8K replay LLM stand-in's rules (scripts/harness/standins/gsm8k_replay_llm.py: a solution's `<<expr=value>>`
steps become calculator calls, one a turn, then its answer; the malformed, wrong and tool-free kinds), over GSM8K's
train split, and the rollout benchmark's leak slope (scripts/harness/bench_rollout/figures.py). The benchmark's run
with them: tests/test_bench_rollout.py (`-m bench`)."""

from __future__ import annotations

import json
import re

import pytest

from harness.standins.gsm8k_replay_llm import load_solutions, replay_turns
from tools.calculator import NAME as CALCULATOR

pytestmark = pytest.mark.unit

NATALIA = ("Natalia sold 48/2 = <<48/2=24>>24 clips in May.\nNatalia sold 48+24 = <<48+24=72>>72 clips altogether "
           "in April and May.\n#### 72")


def _calls(turn: str) -> list[str]:
    return re.findall(r"<tool_call>\n(.*?)\n</tool_call>", turn, re.DOTALL)


def test_a_solution_becomes_one_calculator_call_per_step_then_the_answer():
    turns = replay_turns(NATALIA, "solve", "Let's go.", max_calls=4)
    assert [json.loads(c)["arguments"]["expression"] for t in turns for c in _calls(t)] == ["48/2", "48+24"]
    assert all(json.loads(c)["name"] == CALCULATOR for t in turns for c in _calls(t))
    assert turns[0].startswith("Let's go.\nNatalia sold 48/2 =") and turns[-1].endswith("#### 72")
    assert "<<" not in "".join(turns)
    assert replay_turns(NATALIA, "wrong", "x", 4)[-1].endswith("#### 73")
    assert _calls(replay_turns(NATALIA, "direct", "x", 4)[0]) == []
    assert len(replay_turns(NATALIA, "solve", "x", max_calls=1)) == 2  # the turn limit: the rest written out


def test_a_malformed_call_is_not_json_and_is_written_again():
    turns = replay_turns(NATALIA, "malformed", "x", 4)
    with pytest.raises(json.JSONDecodeError):
        json.loads(_calls(turns[0])[0])
    assert json.loads(_calls(turns[1])[0])["arguments"]["expression"] == "48/2"
    assert turns[-1].endswith("#### 72")


def test_over_gsm8k_train_the_calls_follow_its_steps(shared_gsm8k_dir):
    solutions = load_solutions(shared_gsm8k_dir / "train.jsonl")
    assert len(solutions) > 7000
    for solution in list(solutions.values())[:2000]:
        steps = len(re.findall(r"<<[^<>]*>>", solution))
        turns = replay_turns(solution, "solve", "x", 4)
        assert sum(len(_calls(t)) for t in turns) == min(steps, 4)
        assert turns[-1].rsplit("####", 1)[1].strip() == solution.rsplit("####", 1)[1].strip()


def test_the_rss_slope_tells_a_leak_from_warm_up():
    from harness.bench_rollout.figures import rss_slope
    warm_up = [[1000 + min(step, 10) * 8, 1010 + min(step, 12) * 6] for step in range(51)]  # +80 MB, then flat
    leak = [[1000 + step * 2.0, 1000 + step * 0.5] for step in range(51)]
    assert rss_slope(warm_up) == 0.0
    assert rss_slope(leak) == pytest.approx(2.0)
    assert rss_slope(leak[:30]) != rss_slope(leak[:30])  # nan: too short to tell
