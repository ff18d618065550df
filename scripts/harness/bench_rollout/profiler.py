"""Where an agent-loop worker's CPU goes: py-spy samples, one record per worker per step."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

from recipes.constants import REPO_ROOT

# ---- where a worker's CPU goes: py-spy samples, one record per worker per step ---------------------------------

PARTS = ("verl_loop", "parser", "tool", "scoring", "trace_summary", "tracer", "flush", "executor_decode", "other")
# innermost frames of a thread that waits (py-spy's idle detection lets some through): not CPU
_WAITING = ("_worker (/", "Condition.wait (/", "Event.wait (/", "select (/", "EpollSelector.select (/",
            "Worker.main_loop (/")


def classify(frames: list[str]) -> str:
    """The part of the agent loop a sampled stack (outermost first, "func (file:line)") is working for: the innermost
    frame that belongs to a known part decides. "idle" for a thread that only waits."""
    if not frames or (frames[-1].startswith(_WAITING) and (
            not frames[-1].startswith("_worker (") or "concurrent/futures/thread.py:81)" in frames[-1])):
        return "idle"
    for frame in reversed(frames):
        func, _, where = frame.partition(" (")
        path = where.rsplit(":", 1)[0]
        if "/weave/" in path or path.endswith(("recipes/tracing/shaping.py", "recipes/trace_relay/sender.py")):
            if any(f.startswith(("flush ", "_flush")) for f in frames):
                return "flush"
            return "tracer"
        if path.endswith("verl/utils/rollout_trace.py"):
            return "tracer"
        if path.endswith(("recipes/gsm8k/tool_parser.py", "agent_loop/tool_parser.py")):
            return "parser"
        if "/tools/" in path and ("/verl/tools/" in path or path.startswith(str(REPO_ROOT))):
            return "tool"
        if path.endswith(("recipes/gsm8k/score.py", "recipes/gsm8k/reward.py", "recipes/gsm8k/answers.py")) or (
                "/verl/utils/reward_score/" in path):
            return "scoring"
        if path.endswith(("recipes/gsm8k/trajectory.py", "recipes/gsm8k/agent_loop.py")):
            if any(f.startswith("summarize ") for f in frames):
                return "trace_summary"
            return "scoring"  # split_turns + decode + model_text: what the in-loop score reads
        if "/verl/" in path or "/ray/" in path or "/asyncio/" in path or "/recipes/" in path:
            return "verl_loop"
    if any("concurrent/futures/thread.py" in f for f in frames) and any(f.startswith("decode ") for f in frames):
        return "executor_decode"  # a bare tokenizer.decode in the loop's executor: a parser's, or token2text's
    return "other"


def thread_cpu(pid: int) -> dict[int, float]:
    """CPU-seconds of each thread of a process (thread id -> seconds), from /proc."""
    ticks, seconds = os.sysconf("SC_CLK_TCK"), {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        seconds[int(task.name)] = (int(fields[11]) + int(fields[12])) / ticks
    return seconds


def _thread_names(actor) -> dict[int, str]:
    """Run inside a worker: its Python threads' names by thread id (the event loop's, the executor's, weave's),
    numbers dropped ("asyncio_3" -> "asyncio", "Thread-2 (_process_batches)" -> "Thread (_process_batches)")."""
    import re

    return {t.native_id: re.sub(r"[-_]?\d+", "", t.name) for t in threading.enumerate()}


def by_thread_name(before: dict[int, float], after: dict[int, float], names: dict[int, str]) -> Counter:
    groups = Counter()
    for tid, seconds in after.items():
        groups[names.get(tid, "other (Ray core, C++)")] += seconds - before.get(tid, 0.0)
    return groups


class StepProfiler:
    """py-spy record on every worker for one step (non-blocking sampling of running threads, idle ones left out)."""

    def __init__(self, pids: list[int], rate: int, out_dir: Path, keep: bool = False) -> None:
        self.pids, self.rate, self.out_dir, self.keep = pids, rate, out_dir, keep
        self.procs: list[tuple[int, subprocess.Popen, Path]] = []

    def start(self, step: int) -> None:
        if not self.rate:
            return
        exe = Path(sys.executable).with_name("py-spy")
        for pid in self.pids:
            out = self.out_dir / f"pyspy_{pid}_{step}.txt"
            proc = subprocess.Popen([str(exe), "record", "--pid", str(pid), "--rate", str(self.rate), "--format",
                                     "raw", "--full-filenames", "--nonblocking", "--output", str(out)],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            self.procs.append((pid, proc, out))
        time.sleep(0.5)  # attached before the step starts

    def stop(self) -> dict[int, Counter]:
        """pid -> samples per part."""
        parts: dict[int, Counter] = {}
        for pid, proc, out in self.procs:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
            counts = Counter()  # "idle" kept apart (not in PARTS)
            if out.exists():
                for line in out.read_text().splitlines():
                    stack, _, n = line.rpartition(" ")
                    if stack and n.isdigit():
                        counts[classify(stack.split(";"))] += int(n)
                if not self.keep:
                    out.unlink()
            parts[pid] = counts
        self.procs = []
        return parts
