"""No tool holds the event loop: a tool's work runs in a process its deadline kills (tools/process_pool.py).

verl awaits `tool.execute` in the agent-loop worker's event loop; a synchronous, CPU-bound evaluation there never
yields, so the recipe's `tool_timeout_s` could not fire and every trajectory of the worker waited (the calculator's
`1e9999999` held it 17 s, `1e999999999` for hours). Here the recipe's real agent loop (verl's ToolAgentLoop as
recipes/gsm8k/agent_loop.py runs it) runs several trajectories in one real event loop, with real work processes;
only the LLM server is a script. A heartbeat coroutine on the same loop measures how long the loop was ever held.
"""

from __future__ import annotations

import asyncio
import os
import time

import pytest

from data_prep.gsm8k_rows import SourceRecord, build_row
from harness import agent_loop_inprocess as harness
from harness.qwen_tokenizer import load_qwen25_tokenizer
from harness.standins.scripted_llm import ScriptedLLM, tool_call
from recipes.gsm8k.agent_loop import ScoredToolAgentLoop
from recipes.gsm8k.tool_sets import get_tool_set
from recipes.gsm8k.tool_timeout import TOOL_TIMEOUTS, timeout_message
from recipes.gsm8k.trajectory import mask_runs
from testkit.pool_work import SPIN
from tools.calculator import NAME as CALCULATOR
from tools.process_pool import KillablePool, WorkFailed, WorkRefused, WorkTimedOut

pytestmark = pytest.mark.integration

QUESTION = "Tom has 70 apples and buys 2 more. How many apples does he have?"
TIMEOUT_S = 2.0  # the agent loop's tool_timeout_s here
TRAJECTORIES = 4


@pytest.fixture(scope="module")
def tok():
    return load_qwen25_tokenizer()


async def heartbeat(stop: asyncio.Event, every_s: float = 0.01) -> float:
    """The longest the loop went without running this coroutine, while it ran."""
    loop, longest = asyncio.get_running_loop(), 0.0
    last = loop.time()
    while not stop.is_set():
        await asyncio.sleep(every_s)
        now = loop.time()
        longest, last = max(longest, now - last), now
    return longest


def run_beside_a_heartbeat(tok, tools_yaml: str | None, first_expression: str):
    """TRAJECTORIES rollouts of the recipe's loop in one event loop, with a heartbeat: Variant 0 sends
    `first_expression` to the calculator, the others 70+2; all then answer 72. Returns the outputs, each one's
    finish time (s from the start), the longest the loop was held, and the tool list."""
    overrides = [f"actor_rollout_ref.rollout.custom.tool_timeout_s={TIMEOUT_S}"]
    if tools_yaml:
        overrides.append(f"actor_rollout_ref.rollout.multi_turn.tool_config_path={tools_yaml}")
    config = harness.compose_trainer_config("calculator", tuple(overrides))
    tools = harness.load_tools(config)

    def script(prompt):
        expression = first_expression if "Variant 0." in prompt else "70+2"
        return [tool_call(CALCULATOR, expression=expression), "#### 72"]

    server = ScriptedLLM(tok, script)
    rows = [build_row(SourceRecord(f"{QUESTION} Variant {i}.", "#### 72", "t", i), "train",
                      get_tool_set("calculator")) for i in range(TRAJECTORIES)]

    async def go():
        await harness.run_rollout(config, tok, ScriptedLLM(tok, script), tools, rows[1], ScoredToolAgentLoop)  # warm
        stop, start = asyncio.Event(), time.perf_counter()
        beat = asyncio.create_task(heartbeat(stop))

        async def one(row):
            output = await harness.run_rollout(config, tok, server, tools, row, ScoredToolAgentLoop)
            return output, time.perf_counter() - start

        done = await asyncio.wait_for(asyncio.gather(*(one(r) for r in rows)), timeout=120)
        stop.set()
        return done, await beat

    done, held = asyncio.run(go())
    return [o for o, _ in done], [t for _, t in done], held, tools


def tool_turn(tok, output) -> str:
    spans = [span for by_model, span in mask_runs(output.response_mask) if not by_model]
    return tok.decode(output.response_ids[spans[0].start:spans[0].stop]) if spans else ""


def test_a_busy_looping_tool_is_cut_at_its_timeout_while_the_loop_serves_the_others(tok, tmp_path):
    yaml_file = tmp_path / "spinning.yaml"
    yaml_file.write_text("tools:\n  - class_name: testkit.faulty_parts.SpinningCalculator\n"
                         "    config:\n      type: native\n")
    outputs, finished, held, tools = run_beside_a_heartbeat(tok, str(yaml_file), SPIN)
    spun, *others = outputs
    print(f"\n[work processes] loop held at most {held * 1e3:.0f} ms; the others finished at "
          f"{', '.join(f'{t:.2f}' for t in finished[1:])} s, the spinning call was cut at {finished[0]:.2f} s "
          f"(tool_timeout_s={TIMEOUT_S:g})")
    assert timeout_message(CALCULATOR, TIMEOUT_S) in tool_turn(tok, spun)
    extra = spun.extra_fields["reward_extra_info"]
    assert spun.reward_score == 0.0 and extra[TOOL_TIMEOUTS] == 1
    for output in others:
        assert "<tool_response>\n72\n</tool_response>" in tool_turn(tok, output) and output.reward_score == 1.0
    # the loop went on serving: the others ended before the cut, and the loop never paused for half the bound
    assert max(finished[1:]) < finished[0] and held < TIMEOUT_S / 2, (finished, held)
    pool = _pool_of(tools)
    assert pool.killed == 1 and all(child.alive() for child in pool.idle)


@pytest.mark.parametrize("expression", ["1e9999999", "9.9e99999999", "1e-9999999"])
def test_the_calculators_own_bombs_cost_the_loop_nothing(tok, expression):
    """The issue's literals through the real calculator: answered (or refused) at once, the others beside them."""
    outputs, finished, held, _ = run_beside_a_heartbeat(tok, None, expression)
    bombed, *others = outputs
    print(f"\n[work processes] {expression}: loop held at most {held * 1e3:.0f} ms, all done by {max(finished):.2f} s")
    assert bombed.reward_score == 1.0 and bombed.extra_fields["reward_extra_info"][TOOL_TIMEOUTS] == 0
    assert all(o.reward_score == 1.0 for o in others) and held < TIMEOUT_S / 2, held


def _pool_of(tools) -> KillablePool:
    from tools.process_pool import pool_for

    (tool,) = tools
    return pool_for(tool.WORK)


# ---- the pool itself ---------------------------------------------------------------------------------------------


def test_a_deadline_kills_the_work_and_a_fresh_process_answers_next():
    pool = KillablePool("testkit.pool_work:spin_on", refusals=("CalcError",), max_processes=2)

    async def go():
        assert await pool.run("6*7") == "42"
        (child,) = pool.idle
        with pytest.raises(WorkTimedOut, match="ran past 0.5 s"):
            await pool.run(SPIN, timeout_s=0.5)
        return child.process.pid

    try:
        pid = asyncio.run(go())
        assert pool.killed == 1 and not _running(pid)
        with pytest.raises(WorkRefused, match="division by zero"):
            asyncio.run(pool.run("1/0"))
        assert asyncio.run(pool.run("2**10")) == "1024" and pool.idle[0].process.pid != pid
    finally:
        pool.close()


def test_a_cancelled_call_kills_its_work_and_frees_its_place():
    """What the agent loop's bound does (it cancels the call at tool_timeout_s)."""
    pool = KillablePool("testkit.pool_work:spin_on", max_processes=1)

    async def go():
        spinning = asyncio.create_task(pool.run(SPIN))
        waiting = asyncio.create_task(pool.run("1+1"))  # no place for it until the spinning one is cut
        await asyncio.sleep(0.5)
        assert not waiting.done() and pool.busy == 1 and len(pool.waiting) == 1
        spinning.cancel()
        return await asyncio.wait_for(waiting, timeout=60)

    try:
        assert asyncio.run(go()) == "2" and pool.killed == 1 and pool.busy == 0 and len(pool.idle) == 1
    finally:
        pool.close()


def test_more_calls_than_processes_wait_their_turn():
    pool = KillablePool("tools.arithmetic:calculate", refusals=("CalcError",), max_processes=2)

    async def go():
        return await asyncio.gather(*(pool.run(f"{i}*3") for i in range(40)))

    try:
        assert asyncio.run(go()) == [str(i * 3) for i in range(40)]
        assert len(pool.idle) <= 2 and pool.busy == 0 and pool.killed == 0
    finally:
        pool.close()


def test_what_is_not_a_refusal_is_a_failure_and_no_process_outlives_it():
    pool = KillablePool("testkit.pool_work:exit_at_once")
    try:
        with pytest.raises(WorkFailed, match=r"the work process exited \(exit code 3\)"):
            asyncio.run(pool.run("1"))
        assert pool.killed == 1 and not pool.idle
        with pytest.raises(WorkFailed, match="arguments are longer than"):
            asyncio.run(pool.run("9" * 100_000))
    finally:
        pool.close()


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as stat:  # a zombie is no longer running
        return stat.read().split(")")[-1].split()[0] != "Z"
