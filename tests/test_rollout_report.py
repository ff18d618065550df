"""The offline report on dumps written by verl's own dump writer from real agent-loop rollouts."""

import asyncio
import json

import pytest

from data_prep.gsm8k_rows import SourceRecord, build_row
from harness import agent_loop_inprocess as harness
from harness.qwen_tokenizer import load_qwen25_tokenizer
from harness.standins.scripted_llm import ScriptedLLM, tool_call
from recipes.gsm8k.agent_loop import ScoredToolAgentLoop
from recipes.gsm8k.tool_sets import get_tool_set
from recipes.results.scoring import by_step
from recipes.results.stats import collapse_alarm
from testkit.commands import command
from testkit.dumps import write_verl_dump
from tools.calculator import NAME as CALCULATOR

pytestmark = pytest.mark.integration

QUESTIONS = [("A baker has 48 muffins and sells half. How many are left?", "24"),
             ("Tom reads 12 pages a day for 6 days. How many pages?", "72")]


def script_for_step(step):
    """Tool use fades over steps (the collapse the report must flag); accuracy is 1 of 2 from step 2 on."""
    def script(prompt):
        right = "72" if "Tom" in prompt else "24"
        answer = right if (step == 1 or "Tom" in prompt) else "25"
        if step == 1:
            return [tool_call(CALCULATOR, expression="12*6" if "Tom" in prompt else "48/2"), f"#### {answer}"]
        return [f"Easy.\n#### {answer}"]
    return script


@pytest.fixture(scope="module")
def dump_dir(tmp_path_factory):
    tok = load_qwen25_tokenizer()
    config = harness.compose_trainer_config("calculator")
    tools = harness.load_tools(config)
    rows = [build_row(SourceRecord(q, f"#### {gt}", "t", i), "train", get_tool_set("calculator"))
            for i, (q, gt) in enumerate(QUESTIONS)]
    folder = tmp_path_factory.mktemp("rollouts")
    for step in (1, 2, 3):
        llm = ScriptedLLM(tok, script_for_step(step))

        async def rollouts(llm=llm):
            runs = (harness.run_rollout(config, tok, llm, tools, r, ScoredToolAgentLoop)
                    for r in rows for _ in range(2))
            return await asyncio.gather(*runs)

        outputs = asyncio.run(rollouts())
        # verl's own writer, as RayPPOTrainer._log_rollout_data calls it
        write_verl_dump(tok, outputs, [r["reward_model"]["ground_truth"] for r in rows for _ in range(2)], folder, step)
    return folder


def test_report_plots_and_summarises(dump_dir, tmp_path, repo_root):
    import subprocess

    out = tmp_path / "report"
    proc = subprocess.run([*command("gsm8k-rollout-report"), "--rollout_dir", str(dump_dir),
                           "--validation_dir", str(dump_dir), "--out", str(out)], cwd=repo_root,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    for name in ("steps.png", "prompts.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and (out / name).stat().st_size > 10_000
    report = (out / "report.md").read_text()
    assert "| 1 | 4 | 1.000 | 1.000 | 1.00 | 1.00 |" in report
    assert "| 3 | 4 | 0.500 | 0.500 | 0.00 | 0.00 |" in report
    assert "**ALARM**: tool-call rate 0% at step 3" in report


def test_dump_lines_are_verls_format(dump_dir):
    line = json.loads((dump_dir / "1.jsonl").read_text().splitlines()[0])
    assert {"input", "output", "gts", "score", "step", "acc", "num_tool_calls"} <= set(line)


def test_alarm_logic():
    steps = [{"step": 1, "tool_call_rate": 0.9}, {"step": 2, "tool_call_rate": 0.4}]
    assert "fell from 90% to 40%" in collapse_alarm(steps, floor=0.2, drop=0.5)
    assert collapse_alarm(steps, floor=0.2, drop=0.4) is None
    assert by_step([]) == []


def test_missing_dumps_are_a_clear_error(tmp_path, repo_root):
    import subprocess

    proc = subprocess.run([*command("gsm8k-rollout-report"), "--rollout_dir", str(tmp_path),
                           "--out", str(tmp_path / "r")], cwd=repo_root, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and "no <step>.jsonl dumps in" in proc.stderr


def test_dumps_with_ref_ops_get_curves_by_operations_needed(tmp_path, repo_root):
    """The chain task's dumps: accuracy and tool calls per rollout by step, for each number of operations needed."""
    import subprocess

    rollouts = tmp_path / "rollouts"
    rollouts.mkdir()
    for step in (1, 2):  # 2-step problems: wrong with one call at step 1, right with two at step 2
        lines = [{"input": "Q1", "output": "", "gts": "1", "score": 1.0, "acc": 1.0, "num_tool_calls": 1, "ref_ops": 1},
                 {"input": "Q2", "output": "", "gts": "2", "score": step - 1.0, "acc": step - 1.0,
                  "num_tool_calls": step, "ref_ops": 2}]
        (rollouts / f"{step}.jsonl").write_text("".join(json.dumps({**line, "step": step}) + "\n" for line in lines))
    out = tmp_path / "report"
    proc = subprocess.run([*command("gsm8k-rollout-report"), "--rollout_dir", str(rollouts), "--out",
                           str(out)], cwd=repo_root, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert (out / "by_ops.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    report = (out / "report.md").read_text()
    assert "| step | 1 ops | 2 ops |" in report
    assert "| 1 | 1.00 / 1.00 | 0.00 / 1.00 |" in report and "| 2 | 1.00 / 1.00 | 1.00 / 2.00 |" in report
    assert "![by_ops](by_ops.png)" in report
