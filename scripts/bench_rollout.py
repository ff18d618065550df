"""Benchmark: a production rollout step of the recipe on CPU: verl 0.9.1's real agent-loop manager and workers in a
real local Ray cluster, the recipe's config for PROFILE=8xh100, its tools, parser, reward, tracing and trace relay,
against LLM servers that answer at once (recipes/standins/gsm8k_replay_llm.py: GSM8K's own training solutions
replayed as hermes calculator calls, with malformed calls, wrong answers, tool-free and over-long answers mixed in).

    python scripts/bench_rollout.py [--steps 3] [--prompts 256] [--n 16] [--workers 8] [--trace-all]
    python scripts/bench_rollout.py --arms recipe --steps 2 --prompts 8 --n 4 --workers 2   # the CI test's run

The arms below run side by side, each with its own manager and its share of --workers (fresh processes), and each
step every arm gets the same --prompts / arms prompts x --n trajectories, fed as verl's trainer feeds them
(RLHFDataset over the real GSM8K train split, uid, n interleaved repeats, global_steps): every worker has the
full step's per-worker load, and the arms compare step by step under the same load on the machine:
  plain            verl's AgentLoopManager + ToolAgentLoop, hermes parser, no tracing, no in-loop scoring (baseline)
  verl_weave       the same with verl's own weave tracing at the recipe's rate (baseline)
  recipe_untraced  the recipe as the launcher composes it, TRACE=off
  recipe           the recipe as the launcher composes it (its trace rate; --trace-all: every trajectory)
Traces go through the recipe's trace relay (started as the launcher starts it) to the W&B endpoint in
WANDB_BASE_URL / WF_TRACE_SERVER_URL when set, else to a loopback W&B stand-in of the bench's own; a recorder
between the relay and that endpoint notes each call the endpoint acknowledges. Nothing else leaves 127.0.0.1.

Per step and arm: wall time; each agent-loop worker's CPU-seconds (split by where they go with py-spy:
verl's loop and Ray, the recipe's parser, tool, scoring, trace summary, tracer and flush); trajectories per
CPU-second; worker RSS after step 1 and at the end; traced calls and bytes; calls acknowledged by the endpoint,
lag from a call's end to that acknowledgement, the relay's spool. Goals (a benchmark, not a timed test): recipe
untraced <= 1.10x plain per trajectory; tracing at the profile's rate <= 2% of worker CPU; worker RSS growth
< 50 MB over 50 steps (--arms recipe --steps 51 at a reduced shape); with --trace-all every traced
trajectory acknowledged exactly once. Last line:
`RESULT trajectories=<t> steps=<N> traced=<expected> acknowledged=<a> lost_traces=<l> duplicate_traces=<d>
recipe_cpu_ratio=<x> trace_cpu_share=<y> worker_rss_growth_mb=<m> relay_lag_p99_ms=<p>`: t over all arms; the
traces, RSS and lag of the recipe arm; x = recipe_untraced / plain worker CPU per trajectory; y = what tracing
adds to the recipe arm's worker CPU (against recipe_untraced, step by step; without that arm, as measured in the
workers: the traced calls, the trace summary and weave's threads).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter, defaultdict
from contextlib import ExitStack
from datetime import datetime
from pathlib import Path

os.environ.setdefault("WANDB_ERROR_REPORTING", "false")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from recipes.constants import REPO_ROOT, SHARED_GSM8K_DIR, TRACE_RELAY_ENV  # noqa: E402

PHASES = ("plain", "verl_weave", "recipe_untraced", "recipe")
# docs/configuration.md "Step time on 8xH100 (estimate)": a whole step, and its rollout (when the agent loop works)
GPU_STEP_ESTIMATE_S, ROLLOUT_ESTIMATE_S = 60, 30
TRACED_PHASE = "recipe"
PROFILE = "8xh100"
EXPERIMENT = "bench_rollout_{phase}"
# Every HTTPS request a Ray worker might make (weave.init's version check on PyPI, which verl's own weave path
# does not switch off) goes to a refused loopback port instead; loopback traffic (the relay) goes direct.
NO_EGRESS_ENV = {"HTTPS_PROXY": "http://127.0.0.1:9", "https_proxy": "http://127.0.0.1:9",
                 "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost",
                 "WANDB_ERROR_REPORTING": "false", "WEAVE_USE_SERVER_CACHE": "false", "WEAVE_PRINT_CALL_LINK": "false",
                 "RAY_USAGE_STATS_ENABLED": "0", "TOKENIZERS_PARALLELISM": "false"}


def log(msg: str) -> None:
    print(f"[bench_rollout] {msg}", flush=True)


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


# ---- what the W&B endpoint acknowledged -----------------------------------------------------------------------

class AckRecorder:
    """Sits between the relay and the W&B endpoint: forwards every request unchanged and notes, for each call the
    endpoint answered 2xx, its trace, attributes, end time, size and when the answer came back."""

    _DROP = {"host", "content-length", "connection", "keep-alive", "transfer-encoding", "accept-encoding"}

    def __init__(self, base_url: str, trace_url: str) -> None:
        import httpx

        self.base_url, self.trace_url = base_url.rstrip("/"), trace_url.rstrip("/")
        self.http = httpx.Client(timeout=120)
        self.calls: dict[str, dict] = {}
        self.starts: Counter[str] = Counter()  # call id -> starts acknowledged (more than 1: sent twice)
        self.lock = threading.Lock()

    def handle(self, request):
        from recipes.trace_relay import protocol
        from recipes.trace_relay.http import Response

        route = protocol.trace_route(request.path)
        url = (self.trace_url + request.path.removeprefix(protocol.TRACE_PREFIX)
               if request.path.startswith(protocol.TRACE_PREFIX + "/") else self.base_url + request.path)
        headers = {k: v for k, v in request.headers.items() if k not in self._DROP}
        answer = self.http.request(request.method, url, content=request.body or None, headers=headers)
        if 200 <= answer.status_code < 300 and protocol.is_write(request.method, route):
            acked = time.time()
            with self.lock:
                for start, end in protocol.complete_calls(route, request.body):
                    call = self.calls.setdefault((start or end)["id"], {"bytes": 0})
                    call["bytes"] += len(json.dumps(start)) + len(json.dumps(end)) if start and end else len(
                        json.dumps(start or end))
                    if start:
                        self.starts[start["id"]] += 1
                        attributes = start.get("attributes") or {}
                        call.update(trace_id=start.get("trace_id"), parent_id=start.get("parent_id"),
                                    op=str(start.get("op_name")), **{k: attributes.get(k) for k in (
                                        "experiment_name", "step", "sample_index", "rollout_n")})
                    if end:
                        call.update(ended_at=_timestamp(end.get("ended_at")), acked_at=acked)
        return Response(answer.status_code, answer.content, answer.headers.get("content-type", "application/json"))

    def phase_calls(self, experiment: str) -> list[dict]:
        """The complete calls (start and end acknowledged) of one phase, each with its trajectory's root attributes."""
        with self.lock:
            calls = [dict(c, id=i) for i, c in self.calls.items() if "op" in c and "acked_at" in c]
        roots = {c["trace_id"]: c for c in calls if c["parent_id"] is None}
        mine = []
        for call in calls:
            root = roots.get(call["trace_id"])
            if root is not None and root.get("experiment_name") == experiment:
                mine.append(dict(call, step=root["step"], root_key=(root["step"], root["sample_index"],
                                                                     root["rollout_n"])))
        return mine


def _timestamp(value) -> float | None:
    if not value:
        return None
    return datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()


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
        if "/weave/" in path or path.endswith("recipes/tracing.py"):
            if any(f.startswith(("flush ", "_flush")) for f in frames):
                return "flush"
            return "tracer"
        if path.endswith("verl/utils/rollout_trace.py"):
            return "tracer"
        if path.endswith(("recipes/tool_parser.py", "agent_loop/tool_parser.py")):
            return "parser"
        if "/tools/" in path and ("/verl/tools/" in path or path.startswith(str(REPO_ROOT))):
            return "tool"
        if path.endswith(("recipes/trajectory_score.py", "recipes/reward.py", "recipes/answers.py")) or (
                "/verl/utils/reward_score/" in path):
            return "scoring"
        if path.endswith(("recipes/trajectory.py", "recipes/agent_loop.py")):
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
    import threading

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


# ---- one phase: a manager and its workers, --steps steps ------------------------------------------------------

def train_dataset(config):
    """verl's trainer's dataset: RLHFDataset over the prepared parquet (prompts too long for the config dropped)."""
    from verl.trainer.ppo.utils import create_rl_dataset
    from verl.utils import hf_tokenizer

    tokenizer = hf_tokenizer(config.actor_rollout_ref.model.path)
    return create_rl_dataset(config.data.train_files, config.data, tokenizer, None)


def prompt_batches(dataset, config, args):
    """verl's trainer's batches: its sampler and collate_fn, uid, the generation keys (RayPPOTrainer._get_gen_batch),
    global_steps, n interleaved repeats."""
    import numpy as np
    from torch.utils.data import DataLoader
    from verl.protocol import DataProto
    from verl.trainer.ppo.utils import create_rl_sampler
    from verl.utils.dataset.rl_dataset import collate_fn

    loader = DataLoader(dataset, batch_size=args.prompts // len(args.arms), collate_fn=collate_fn, drop_last=True,
                        sampler=create_rl_sampler(config.data, dataset))
    step = 0
    while True:
        for batch_dict in loader:
            step += 1
            batch = DataProto.from_single_dict(batch_dict)
            batch.non_tensor_batch["uid"] = np.array([str(uuid.uuid4()) for _ in range(len(batch))], dtype=object)
            gen_batch = DataProto(non_tensor_batch=dict(batch.non_tensor_batch))  # every non-tensor key, no tensors
            gen_batch.meta_info["global_steps"] = step
            yield step, gen_batch.repeat(repeat_times=args.n, interleave=True)


def expected_traced(batch, workers: int, per_worker: int | None) -> list[int]:
    """Trajectories each worker traces: verl picks up to `per_worker` distinct prompts of its chunk at random and
    traces all their rollouts (each chunk holds whole GRPO groups: --prompts is a multiple of --workers)."""
    counts = []
    for chunk in batch.chunk(workers):
        groups = Counter(chunk.non_tensor_batch["index"].tolist())
        chosen = len(groups) if per_worker is None else min(per_worker, len(groups))
        counts.append(chosen * (len(chunk) // len(groups)))
    return counts


def _instrument(actor) -> bool:
    """Run inside a worker that traces: count the calls its weave client finishes, by trajectory, and the CPU its
    event-loop thread spends in the trace calls verl makes (the tracer's create_call / finish_call, outermost
    only: sanitizing, weave's own bookkeeping, the conversation call) and in the recipe's trace summary."""
    import threading

    from verl.utils.rollout_trace import RolloutTraceConfig

    if RolloutTraceConfig.get_backend() != "weave" or RolloutTraceConfig.get_client() is None:
        return False
    from weave.trace.weave_client import WeaveClient

    if hasattr(WeaveClient, "bench_finished"):
        return True
    finished, spent, inside = Counter(), {"trace_s": 0.0}, threading.local()
    counted = WeaveClient.finish_call

    def finish_call(self, call, *args, **kwargs):
        attributes = call.attributes or {}
        finished[tuple(attributes.get(k) for k in ("step", "sample_index", "rollout_n"))] += 1
        return counted(self, call, *args, **kwargs)

    def timed(fn):
        def wrapper(*args, **kwargs):
            depth = getattr(inside, "depth", 0)
            inside.depth, start = depth + 1, time.thread_time()
            try:
                return fn(*args, **kwargs)
            finally:
                inside.depth = depth
                if depth == 0:
                    spent["trace_s"] += time.thread_time() - start
        return wrapper

    WeaveClient.finish_call = finish_call
    owners = [WeaveClient]
    try:
        from recipes.agent_loop import ScoredToolAgentLoop
        from recipes.tracing import TextOnlyTracer

        owners.append(TextOnlyTracer)
        ScoredToolAgentLoop.summarize = staticmethod(timed(ScoredToolAgentLoop.summarize))
    except ImportError:
        pass
    for owner in owners:
        for name in ("create_call", "finish_call"):
            setattr(owner, name, timed(getattr(owner, name)))
    WeaveClient.bench_finished, WeaveClient.bench_spent = finished, spent
    return True


def _instrumented(actor) -> dict:
    from weave.trace.weave_client import WeaveClient

    if not hasattr(WeaveClient, "bench_finished"):  # this worker traces nothing (its weave.init failed: its log says)
        return {"finished": {}, "trace_s": 0.0}
    return {"finished": dict(WeaveClient.bench_finished), "trace_s": WeaveClient.bench_spent["trace_s"]}


def _gc_clock(actor) -> dict:
    """Run inside a worker: the CPU its Python garbage collector has spent, by generation (installed on first
    call), and how many collections."""
    import gc

    clock = getattr(gc, "bench_clock", None)
    if clock is None:
        clock = gc.bench_clock = {"s": Counter(), "n": Counter(), "started": None}

        def callback(phase, info):
            if phase == "start":
                clock["started"] = time.thread_time()
            elif clock["started"] is not None:
                clock["s"][info["generation"]] += time.thread_time() - clock["started"]
                clock["n"][info["generation"]] += 1
                clock["started"] = None

        gc.callbacks.append(callback)
    return {"s": dict(clock["s"]), "n": dict(clock["n"])}


# weave's own threads (by name); the sender it restarts at every flush has exited by the end of a step
WEAVE_THREADS = ("WeaveThreadPool", "_process_batches", "_health_check", "exited during the step")


class Arm:
    """One configuration under test: its manager and workers, and what they did step by step."""

    def __init__(self, name: str, args, ctx) -> None:
        import psutil
        import ray
        from verl.experimental.agent_loop import AgentLoopManager
        from verl.utils.import_utils import load_class_from_fqn
        from verl.workers.rollout.llm_server import LLMServerClient

        self.name, self.experiment = name, EXPERIMENT.format(phase=name)
        (ctx.work_dir / name).mkdir(parents=True, exist_ok=True)
        self.config, self.overrides = compose_bench_config(name, args, ctx.data_dir, ctx.model_dir,
                                                           ctx.work_dir / name)
        rollout = self.config.actor_rollout_ref.rollout
        fqn = rollout.agent.get("agent_loop_manager_class")
        manager_class = load_class_from_fqn(fqn, "AgentLoopManager") if fqn else AgentLoopManager
        self.per_worker = rollout.trace.get("max_samples_per_step_per_worker") if rollout.trace.get("backend") else 0
        log(f"{name}: {manager_class.__name__}, agent loop "
            f"{'recipe' if rollout.agent.agent_loop_config_path else 'verl ToolAgentLoop'}, parser "
            f"{rollout.multi_turn.format}, trace {rollout.trace.get('backend')} "
            f"({'all' if self.per_worker is None else self.per_worker} prompts per worker per step), "
            f"{rollout.agent.num_workers} workers")
        client = LLMServerClient(config=self.config, load_balancer_handle=ctx.load_balancer)
        self.manager = manager_class.create(config=self.config, llm_client=client)
        self.workers = self.manager.agent_loop_workers
        self.pids = ray.get([w.__ray_call__.remote(lambda self: os.getpid()) for w in self.workers])
        traced = ray.get([w.__ray_call__.remote(_instrument) for w in self.workers])
        self.instrumented = any(traced)
        if self.instrumented and not all(traced):  # its traces will be missing from the counts: say whose
            untraced = [pid for pid, ok in zip(self.pids, traced, strict=True) if not ok]
            print(f"[bench_rollout] WARNING: {self.name}: agent-loop worker(s) {untraced} trace nothing (weave.init "
                  "failed there; see the worker's log)", file=sys.stderr, flush=True)
        ray.get([w.__ray_call__.remote(_gc_clock) for w in self.workers])
        self.processes = [psutil.Process(pid) for pid in self.pids]
        self.steps: list[dict] = []
        self.made: Counter = Counter()

    def before(self) -> None:
        import ray

        self._cpu = [sum(p.cpu_times()[:2]) for p in self.processes]
        self._threads = [thread_cpu(pid) for pid in self.pids]
        self._trace = self._trace_s(ray) if self.instrumented else 0.0
        self._gc = self._gc_totals(ray)

    def _gc_totals(self, ray) -> tuple[Counter, Counter]:
        seconds, count = Counter(), Counter()
        for clock in ray.get([w.__ray_call__.remote(_gc_clock) for w in self.workers]):
            seconds.update(clock["s"])
            count.update(clock["n"])
        return seconds, count

    def _trace_s(self, ray) -> float:
        return sum(r["trace_s"] for r in ray.get([w.__ray_call__.remote(_instrumented) for w in self.workers]))

    def run(self, step: int, batch) -> None:
        start = time.perf_counter()
        self._output = self.manager.generate_sequences(batch)
        self._wall = time.perf_counter() - start
        if len(self._output) != len(batch):
            raise RuntimeError(f"{self.name} step {step}: {len(self._output)} trajectories back for {len(batch)}")

    def after(self, step: int, batch, parts: dict) -> dict:
        import ray

        cpu = [sum(p.cpu_times()[:2]) - before for p, before in zip(self.processes, self._cpu, strict=True)]
        threads = Counter()
        names = ray.get([w.__ray_call__.remote(_thread_names) for w in self.workers])
        for pid, earlier, named in zip(self.pids, self._threads, names, strict=True):
            threads.update(by_thread_name(earlier, thread_cpu(pid), named))
        threads["exited during the step"] = sum(cpu) - sum(threads.values())  # e.g. weave's sender, restarted at flush
        weave_threads = sum(v for k, v in threads.items() if any(w in k for w in WEAVE_THREADS))
        gc_seconds, gc_count = self._gc_totals(ray)
        gc_seconds.subtract(self._gc[0])
        gc_count.subtract(self._gc[1])
        traced = expected_traced(batch, len(self.workers), self.per_worker) if self.per_worker != 0 \
            else [0] * len(self.workers)
        record = {"step": step, "wall_s": self._wall, "trajectories": len(self._output), "worker_cpu_s": cpu,
                  "rss_mb": [p.memory_info().rss / 2**20 for p in self.processes], "expected_traced": traced,
                  "parts": {pid: parts.get(pid, {}) for pid in self.pids}, "outcomes": outcomes(self._output),
                  "threads_cpu_s": {k: round(v, 2) for k, v in threads.most_common() if v > 0},
                  "gc_cpu_s": {str(g): round(v, 3) for g, v in sorted(gc_seconds.items())},
                  "gc_collections": {str(g): v for g, v in sorted(gc_count.items())},
                  "trace_cpu_s": (self._trace_s(ray) - self._trace + weave_threads) if self.instrumented else 0.0}
        self.steps.append(record)
        log(f"{self.name} step {step}: {self._wall:.1f} s, worker CPU {sum(cpu):.1f} s "
            f"({len(self._output) / max(sum(cpu), 1e-9):.0f} trajectories per CPU-s), traced {sum(traced)}"
            + (f" (tracing {record['trace_cpu_s']:.2f} CPU-s)" if self.instrumented else "")
            + f", GC {sum(gc_seconds.values()):.2f} CPU-s in {dict(gc_count)} collections"
            + f", {record['outcomes']}")
        return record

    def finish(self, args, ctx) -> dict:
        import ray

        if self.instrumented:
            for counts in ray.get([w.__ray_call__.remote(_instrumented) for w in self.workers]):
                self.made.update(counts["finished"])
            wait_for_acknowledgements(ctx.recorder, self.experiment, sum(self.made.values()), args.ack_timeout)
        for worker in self.workers:
            ray.kill(worker)
        return {"phase": self.name, "steps": self.steps, "made_calls": dict(self.made), "per_worker": self.per_worker,
                "profile_rate": args.profile_rate, "overrides": self.overrides, "experiment": self.experiment}


def run_arms(args, ctx) -> dict[str, dict]:
    """Every arm's workers at once, each step the same prompts to every arm, run concurrently: the arms share the
    machine's state and the step's content, so they compare step by step."""
    from concurrent.futures import ThreadPoolExecutor

    import psutil

    started = time.perf_counter()
    arms = [Arm(name, args, ctx) for name in args.arms]
    log(f"{sum(len(a.workers) for a in arms)} workers up in {time.perf_counter() - started:.1f} s")
    relay = psutil.Process(int((ctx.spool / "lock").read_text().split()[1]))  # the serving relay (the spool's holder)
    pids = [pid for arm in arms for pid in arm.pids]
    profiler = StepProfiler(pids, args.profile_rate, ctx.work_dir, keep=args.work_dir is not None)
    batches = prompt_batches(ctx.dataset, arms[0].config, args)
    with ThreadPoolExecutor(len(arms)) as pool:
        for _ in range(args.steps):
            step, batch = next(batches)
            relay_before, start = sum(relay.cpu_times()[:2]), time.perf_counter()
            for arm in arms:
                arm.before()
            profiler.start(step)
            for future in [pool.submit(arm.run, step, batch) for arm in arms]:
                future.result()
            parts = profiler.stop()
            wall, spool, relay_cpu = time.perf_counter() - start, spool_state(ctx.spool), sum(relay.cpu_times()[:2])
            for arm in arms:
                arm.after(step, batch, parts).update(spool=spool, relay_cpu_s=relay_cpu - relay_before,
                                                     step_wall_s=wall)
    return {arm.name: arm.finish(args, ctx) for arm in arms}


def wait_for_acknowledgements(recorder: AckRecorder, experiment: str, made: int, timeout_s: float) -> None:
    """Until the endpoint acknowledged as many of the phase's calls as its workers finished (or the time is up)."""
    start = time.monotonic()
    while (acked := len(recorder.phase_calls(experiment))) < made and time.monotonic() - start < timeout_s:
        time.sleep(0.5)
    log(f"{experiment}: {acked} of {made} traced calls acknowledged by the W&B endpoint "
        f"{time.monotonic() - start:.1f} s after the last step")


def outcomes(output) -> dict:
    """What the trajectories did: mean turns, share answered right, with a bad call, at the length limit."""
    import numpy as np

    nt = output.non_tensor_batch
    response_length = output.batch["responses"].shape[1]
    lengths = output.batch["attention_mask"][:, -response_length:].sum(dim=1)
    summary = {"turns": round(float(np.mean(nt["__num_turns__"])), 2),
               "at_length_limit": round(float((lengths >= response_length).float().mean()), 3)}
    if "acc" in nt:
        summary["correct"] = round(float(np.mean(nt["acc"])), 3)
        summary["bad_call"] = round(float(np.mean(nt["num_bad_tool_calls"] > 0)), 3)
    return summary


def spool_state(spool: Path) -> dict:
    segments = sorted((spool / "segments").glob("*.spool")) if (spool / "segments").is_dir() else []
    checkpoint = json.loads((spool / "checkpoint.json").read_text()) if (spool / "checkpoint.json").is_file() else {}
    return {"bytes": sum(p.stat().st_size for p in segments), "sent_records": checkpoint.get("sent", 0)}


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
    from recipes.standins.weave_http_server import API_KEY, loopback_wandb

    wandb = stack.enter_context(loopback_wandb())
    return wandb.url, wandb.url + "/traces", API_KEY


def setup(args, stack: ExitStack) -> Context:
    import ray
    from verl.workers.rollout.router import get_router_handle

    from recipes.cpu_backend.qwen_tokenizer import build_tiny_qwen2_model_dir, default_cache_dir
    from recipes.standins.gsm8k_replay_llm import GSM8KReplayServer
    from recipes.trace_relay.http import LoopbackHTTPServer
    from recipes.tracing import RELAY_CLIENT_KEY

    ctx = Context()
    ctx.work_dir = Path(args.work_dir or stack.enter_context(tempfile.TemporaryDirectory(prefix="bench_rollout_")))
    ctx.work_dir.mkdir(parents=True, exist_ok=True)
    ctx.data_dir = prepare_data(args, ctx.work_dir)
    ctx.model_dir = build_tiny_qwen2_model_dir(default_cache_dir() / "tiny-qwen2")
    base, trace, key = start_endpoint(stack)
    ctx.recorder = AckRecorder(base, trace)
    recorder_http = LoopbackHTTPServer(ctx.recorder).start()
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
           # TRACE_RELAY_ENV (recipes/tracing.py use_trace_relay)
           "WANDB_BASE_URL": relay_url, "WF_TRACE_SERVER_URL": relay_url + "/traces", "WANDB_API_KEY": RELAY_CLIENT_KEY}
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


# ---- figures -----------------------------------------------------------------------------------------------------

def steady(steps: list[dict]) -> list[dict]:
    """The steps after the first (the first pays for warm-up: imports, first template renders), if there are any."""
    return steps[1:] if len(steps) > 1 else steps


def cpu_figures(result: dict) -> dict:
    runs = steady(result["steps"])
    cpu = sum(sum(s["worker_cpu_s"]) for s in runs)
    trajectories = sum(s["trajectories"] for s in runs)
    samples = Counter()
    for s in runs:
        for parts in s["parts"].values():
            samples.update(parts)
    total = sum(samples[part] for part in PARTS)
    shares = {part: samples[part] / total for part in PARTS} if total else {}
    rss = [s["rss_mb"] for s in result["steps"]]
    threads = Counter()
    for s in runs:
        threads.update(s.get("threads_cpu_s", {}))
    turns = sum(s["outcomes"]["turns"] * s["trajectories"] for s in runs)
    traced, tracing = sum(sum(s["expected_traced"]) for s in runs), sum(s.get("trace_cpu_s", 0.0) for s in runs)
    return {"cpu_per_step_s": cpu / len(runs), "cpu_per_trajectory_ms": 1e3 * cpu / trajectories,
            "cpu_per_step_by_step_s": [sum(s["worker_cpu_s"]) for s in result["steps"]],
            "trace_cpu_share": tracing / cpu, "trace_ms_per_traced_trajectory": 1e3 * tracing / traced if traced
            else float("nan"),
            "cpu_per_turn_ms": 1e3 * cpu / turns, "turns_per_trajectory": turns / trajectories,
            "profile_coverage": total / result["profile_rate"] / cpu if result["profile_rate"] else 0.0,
            "trajectories_per_cpu_s": trajectories / cpu, "wall_per_step_s": sum(s["wall_s"] for s in runs) / len(runs),
            "max_worker_cpu_per_step_s": max(max(s["worker_cpu_s"]) for s in runs), "shares": shares,
            "rss_step1_mb": rss[0], "rss_end_mb": rss[-1], "rss_by_step_mb": [max(r) for r in rss],
            "threads_cpu_per_step_s": {k: v / len(runs) for k, v in threads.most_common()},
            "rss_growth_mb": max(end - first for first, end in zip(rss[0], rss[-1], strict=True)),
            "rss_slope_mb_per_step": rss_slope(rss)}


RSS_SLOPE_STEPS = 30  # a leak grows with the steps; warm-up (allocator arenas, caches, first compiles) levels off


def rss_slope(rss: list[list[float]]) -> float:
    """The steepest worker's least-squares RSS slope (MB per step) over the last RSS_SLOPE_STEPS steps; nan for a
    run too short to tell a leak from warm-up (fewer than RSS_SLOPE_STEPS + 1 steps)."""
    if len(rss) <= RSS_SLOPE_STEPS:
        return float("nan")
    tail = rss[-RSS_SLOPE_STEPS:]
    mean_x = (len(tail) - 1) / 2
    var_x = sum((x - mean_x) ** 2 for x in range(len(tail)))
    slopes = []
    for worker in zip(*tail, strict=True):
        mean_y = sum(worker) / len(worker)
        slopes.append(sum((x - mean_x) * (y - mean_y) for x, y in enumerate(worker)) / var_x)
    return max(slopes)


def trace_figures(result: dict, recorder: AckRecorder) -> dict:
    calls = recorder.phase_calls(result["experiment"])
    made = result["made_calls"]
    made_by_key = Counter({k: v for k, v in made.items() if isinstance(k, tuple)})
    acked_by_key, roots_by_key = defaultdict(set), defaultdict(set)
    per_step = defaultdict(lambda: {"calls": 0, "bytes": 0})
    lags = []
    for call in calls:
        acked_by_key[call["root_key"]].add(call["id"])
        if call["parent_id"] is None:
            roots_by_key[call["root_key"]].add(call["id"])
        per_step[call["step"]]["calls"] += 1
        per_step[call["step"]]["bytes"] += call["bytes"]
        if call.get("ended_at"):
            lags.append(1e3 * (call["acked_at"] - call["ended_at"]))
    expected = sum(sum(s["expected_traced"]) for s in result["steps"])
    acknowledged = sum(1 for key, n in made_by_key.items() if len(acked_by_key.get(key, ())) >= n
                       and len(roots_by_key.get(key, ())) >= 1)
    twice = {i for call in calls for i in [call["id"]] if recorder.starts[i] > 1}
    duplicates = sum(1 for key, ids in roots_by_key.items() if len(ids) > 1 or ids & twice)
    lags.sort()
    return {"expected": expected, "expected_per_step": expected / len(result["steps"]),
            "made_trajectories": len(made_by_key), "made_calls": sum(made_by_key.values()),
            "acked_calls": len(calls), "acknowledged": acknowledged, "lost": expected - acknowledged,
            "duplicates": duplicates, "per_step": dict(per_step),
            "lag_p50_ms": _percentile(lags, 0.50), "lag_p99_ms": _percentile(lags, 0.99),
            "lag_max_ms": lags[-1] if lags else float("nan")}


def _percentile(values: list[float], q: float) -> float:
    return values[min(len(values) - 1, int(q * len(values)))] if values else float("nan")


def report(args, results: dict[str, dict], recorder: AckRecorder) -> dict:
    """Print the per-step and per-phase tables; the figures of the RESULT line."""
    figures = {}
    for phase, result in results.items():
        cpu = figures.setdefault(phase, {})["cpu"] = cpu_figures(result)
        print(f"\n== {phase} ({result['experiment']}): per step")
        print("step  wall_s  worker_cpu_s  traj/cpu_s  max_worker_cpu_s  traced  calls  bytes  spool_bytes  relay_cpu_s"
              "  outcomes")
        tf = trace_figures(result, recorder) if result["per_worker"] != 0 else None
        figures[phase]["trace"] = tf
        for s in result["steps"]:
            per = (tf or {}).get("per_step", {}).get(s["step"], {"calls": 0, "bytes": 0})
            cpu_s = sum(s["worker_cpu_s"])
            print(f"{s['step']:>4}  {s['wall_s']:6.1f}  {cpu_s:12.1f}  {s['trajectories'] / cpu_s:10.0f}  "
                  f"{max(s['worker_cpu_s']):16.1f}  {sum(s['expected_traced']):6}  {per['calls']:5}  "
                  f"{per['bytes']:5}  {s['spool']['bytes']:11}  {s.get('relay_cpu_s', 0):11.2f}  {s['outcomes']}")
        print(f"steady (steps after the first): {cpu['cpu_per_step_s']:.1f} worker CPU-s per step, "
              f"{cpu['cpu_per_trajectory_ms']:.2f} ms per trajectory ({cpu['turns_per_trajectory']:.2f} turns, "
              f"{cpu['cpu_per_turn_ms']:.2f} ms per turn), {cpu['trajectories_per_cpu_s']:.0f} "
              f"trajectories per CPU-s, wall {cpu['wall_per_step_s']:.1f} s; busiest worker "
              f"{cpu['max_worker_cpu_per_step_s']:.1f} CPU-s in a step")
        if cpu["shares"]:
            print(f"where worker CPU goes (py-spy samples, {100 * cpu['profile_coverage']:.0f}% of it sampled): "
                  + ", ".join(f"{part} {100 * share:.1f}%" for part, share in cpu["shares"].items() if share))
        print("worker CPU-s per step by thread: " + ", ".join(
            f"{name} {seconds:.1f}" for name, seconds in cpu["threads_cpu_per_step_s"].items() if seconds >= 0.05))
        if len(result["steps"]) > 5:
            every = max(1, len(result["steps"]) // 10)
            print("largest worker RSS MB by step: " + ", ".join(
                f"{s['step']}: {max(s['rss_mb']):.0f}" for s in result["steps"][::every]))
        print("worker RSS MB after step 1: " + " ".join(f"{v:.0f}" for v in cpu["rss_step1_mb"])
              + "; at the end: " + " ".join(f"{v:.0f}" for v in cpu["rss_end_mb"])
              + f"; largest growth {cpu['rss_growth_mb']:.1f} MB"
              + (f"; over the last {RSS_SLOPE_STEPS} steps {cpu['rss_slope_mb_per_step']:.2f} MB per step at most "
                 f"({50 * cpu['rss_slope_mb_per_step']:.1f} MB per 50 steps)"
                 if cpu["rss_slope_mb_per_step"] == cpu["rss_slope_mb_per_step"] else ""))
        if tf:
            print(f"traces: {tf['expected']} trajectories expected, {tf['made_trajectories']} traced by the workers "
                  f"({tf['made_calls']} calls), {tf['acked_calls']} calls acknowledged by the W&B endpoint, "
                  f"{tf['acknowledged']} trajectories complete there, {tf['lost']} lost, {tf['duplicates']} twice; "
                  f"lag from a call's end to its acknowledgement p50 {tf['lag_p50_ms']:.0f} ms, "
                  f"p99 {tf['lag_p99_ms']:.0f} ms, max {tf['lag_max_ms']:.0f} ms")
    return figures


def print_goals(args, figures: dict) -> None:
    goals = comparisons(figures)
    by_step = ", ".join(f"{r:.3f}" for r in goals["recipe_cpu_ratio_by_step"])
    print("\n== goals")
    print(f"recipe untraced / verl plain, worker CPU per trajectory: {goals['recipe_cpu_ratio']:.3f} (goal <= 1.10; "
          f"step by step {by_step}); per assistant turn: {goals['recipe_cpu_ratio_per_turn']:.3f} (the recipe answers "
          "a malformed call and the trajectory goes on; verl's hermes parser ends it there)")
    print(f"tracing at {'every trajectory' if args.trace_all else 'the profile rate'}: "
          f"{100 * goals['trace_cpu_share']:.2f}% of worker CPU per step (measured in the traced calls, the trace "
          f"summary and weave's threads; goal <= 2%), {goals['trace_ms_per_traced_trajectory']:.1f} ms per traced "
          f"trajectory; the traced arm against the untraced one: {100 * goals['trace_cpu_share_paired']:.2f}% "
          f"({goals['trace_ms_per_traced_trajectory_paired']:.1f} ms per traced trajectory); py-spy's share of "
          f"runnable samples in tracing: {100 * goals.get('trace_cpu_share_sampled', float('nan')):.1f}%; verl's own "
          f"weave tracing at the same rate, against plain: {100 * goals['verl_weave_cpu_share']:.1f}%")
    if "worker_cpu_per_step_s" in goals:
        full = goals["worker_cpu_per_trajectory_ms"] * 4096 / 1e3
        busiest = figures[TRACED_PHASE]["cpu"]["max_worker_cpu_per_step_s"]
        print(f"agent-loop worker CPU (recipe arm): {goals['worker_cpu_per_step_s']:.1f} CPU-s per step here, "
              f"{full:.0f} CPU-s per 4,096 trajectories at this per-worker load = {full / GPU_STEP_ESTIMATE_S:.2f} x "
              f"the {GPU_STEP_ESTIMATE_S} s estimated for a GPU step (docs/configuration.md); busiest worker "
              f"{busiest:.1f} CPU-s in a step = {busiest / ROLLOUT_ESTIMATE_S:.2f} x the {ROLLOUT_ESTIMATE_S} s "
              "estimated for its rollout")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=3, help="steps (the first counts as warm-up when there are more)")
    p.add_argument("--prompts", type=int, default=256, help="prompts per step (data.train_batch_size)")
    p.add_argument("--n", type=int, default=16, help="rollouts per prompt (actor_rollout_ref.rollout.n)")
    p.add_argument("--workers", type=int, default=8, help="agent-loop workers (rollout.agent.num_workers)")
    p.add_argument("--servers", type=int, default=2, help="LLM server stand-ins behind verl's load balancer")
    p.add_argument("--arms", default=",".join(PHASES),
                   help=f"comma-separated, of {', '.join(PHASES)}: run side by side, each on --workers / arms workers "
                        "with --prompts / arms prompts a step (the same prompts)")
    p.add_argument("--trace-all", action="store_true", help="the recipe arm traces every trajectory")
    p.add_argument("--tool-set", default="calculator", help="as TOOL_SET (data prep and config)")
    p.add_argument("--profile-rate", type=int, default=50, help="py-spy samples per second per worker (0: off)")
    p.add_argument("--ack-timeout", type=float, default=120.0,
                   help="seconds to wait after the last step for the endpoint to acknowledge the traced calls")
    p.add_argument("--gsm8k-dir", type=Path, default=SHARED_GSM8K_DIR, help="GSM8K's train.jsonl / test.jsonl")
    p.add_argument("--work-dir", type=Path, help="keep data, spool and profiles here (default: a temporary dir)")
    p.add_argument("--json", type=Path, help="write every figure here")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--verbose", action="store_true", help="show the Ray workers' logs")
    args = p.parse_args(argv)
    args.arms = [x for x in args.arms.split(",") if x]
    unknown = set(args.arms) - set(PHASES)
    if unknown or not args.arms or len(set(args.arms)) != len(args.arms):
        p.error(f"--arms: distinct names of {', '.join(PHASES)}, not {args.arms}")
    if min(args.steps, args.prompts, args.n, args.workers, args.servers) < 1:
        p.error("--steps, --prompts, --n, --workers and --servers must be positive")
    if args.workers % len(args.arms) or args.prompts % args.workers:
        p.error(f"--workers ({args.workers}) must be a multiple of the arms ({len(args.arms)}) and --prompts "
                f"({args.prompts}) of --workers: verl splits a step into equal chunks, and whole GRPO groups keep the "
                "traced count exact")
    if not (args.gsm8k_dir / "train.jsonl").is_file():
        p.error(f"no GSM8K at {args.gsm8k_dir} (train.jsonl): pass --gsm8k-dir")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    log(f"{args.steps} steps x {args.prompts} prompts x {args.n} rollouts on {args.workers} agent-loop workers, "
        f"{args.servers} LLM server stand-ins, profile {PROFILE}, arms {', '.join(args.arms)} side by side"
        + (", tracing every trajectory" if args.trace_all else ""))
    started = time.perf_counter()
    with ExitStack() as stack:
        ctx = setup(args, stack)
        results = run_arms(args, ctx)
        servers = [ray_get(s.stats.remote()) for s in ctx.servers.values()]
        figures = report(args, results, ctx.recorder)
        print_goals(args, figures)
    print("\n" + ctx.relay_summary)
    kinds = Counter()
    for stats in servers:
        kinds.update(stats)
    log(f"LLM stand-in: {dict(kinds)}")
    if kinds["unknown_question"]:
        raise RuntimeError(f"{kinds['unknown_question']} prompts held no GSM8K training question")
    log(f"total wall time {time.perf_counter() - started:.0f} s")
    if args.json:
        kept = {phase: dict(r, made_calls={str(k): v for k, v in r["made_calls"].items()})
                for phase, r in results.items()}
        args.json.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "results": kept,
                                         "figures": figures}, default=str, indent=1))
    print(result_line(args, results, figures))
    return 0


def ray_get(ref):
    import ray

    return ray.get(ref)


def comparisons(figures: dict) -> dict:
    """The goals' figures, from the phases that ran (nan where a phase is missing)."""
    nan = float("nan")
    cpu = {phase: f["cpu"] for phase, f in figures.items()}
    out = {"recipe_cpu_ratio": nan, "recipe_cpu_ratio_per_turn": nan, "trace_cpu_share_paired": nan,
           "trace_ms_per_traced_trajectory_paired": nan, "verl_weave_cpu_share": nan, "recipe_cpu_ratio_by_step": [],
           "trace_cpu_share": cpu[TRACED_PHASE]["trace_cpu_share"] if TRACED_PHASE in cpu else nan,
           "trace_ms_per_traced_trajectory": cpu[TRACED_PHASE]["trace_ms_per_traced_trajectory"]
           if TRACED_PHASE in cpu else nan}
    if "plain" in cpu and "recipe_untraced" in cpu:
        recipe, plain = cpu["recipe_untraced"], cpu["plain"]
        out["recipe_cpu_ratio"] = recipe["cpu_per_trajectory_ms"] / plain["cpu_per_trajectory_ms"]
        out["recipe_cpu_ratio_per_turn"] = recipe["cpu_per_turn_ms"] / plain["cpu_per_turn_ms"]
        out["recipe_cpu_ratio_by_step"] = [r / q for r, q in zip(recipe["cpu_per_step_by_step_s"],
                                                                  plain["cpu_per_step_by_step_s"], strict=True)]
    if TRACED_PHASE in cpu and "recipe_untraced" in cpu:
        traced, untraced = cpu[TRACED_PHASE]["cpu_per_step_s"], cpu["recipe_untraced"]["cpu_per_step_s"]
        out["trace_cpu_share_paired"] = (traced - untraced) / traced
        per_step = (figures[TRACED_PHASE]["trace"] or {}).get("expected_per_step") or nan
        out["trace_ms_per_traced_trajectory_paired"] = 1e3 * (traced - untraced) / per_step
    if "verl_weave" in cpu and "plain" in cpu:
        out["verl_weave_cpu_share"] = 1 - cpu["plain"]["cpu_per_step_s"] / cpu["verl_weave"]["cpu_per_step_s"]
    if TRACED_PHASE in cpu:
        out["trace_cpu_share_sampled"] = sum(cpu[TRACED_PHASE]["shares"].get(p, 0.0)
                                             for p in ("tracer", "flush", "trace_summary"))
        out["worker_cpu_per_step_s"] = cpu[TRACED_PHASE]["cpu_per_step_s"]
        out["worker_cpu_per_trajectory_ms"] = cpu[TRACED_PHASE]["cpu_per_trajectory_ms"]
    return out


def result_line(args, results: dict, figures: dict) -> str:
    nan = float("nan")
    traced = figures.get(TRACED_PHASE, {}).get("trace") or {}
    recipe = figures.get(TRACED_PHASE, {}).get("cpu")
    goals = comparisons(figures)
    # what tracing adds: the traced arm against the untraced one, step by step; else as measured in the workers
    paired = goals["trace_cpu_share_paired"]
    trace_share = paired if paired == paired else goals["trace_cpu_share"]
    trajectories = sum(s["trajectories"] for r in results.values() for s in r["steps"])
    return (f"RESULT trajectories={trajectories} steps={args.steps} traced={traced.get('expected', 0)} "
            f"acknowledged={traced.get('acknowledged', 0)} lost_traces={traced.get('lost', 0)} "
            f"duplicate_traces={traced.get('duplicates', 0)} recipe_cpu_ratio={goals['recipe_cpu_ratio']:.3f} "
            f"trace_cpu_share={trace_share:.4f} "
            f"worker_rss_growth_mb={recipe['rss_growth_mb'] if recipe else nan:.1f} "
            f"relay_lag_p99_ms={traced.get('lag_p99_ms', nan):.0f}")


if __name__ == "__main__":
    sys.exit(main())
