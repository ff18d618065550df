"""One arm of the bench: an agent-loop manager and its workers, run for --steps steps."""

from __future__ import annotations

import json
import os
import sys
import threading
import time
import uuid
from collections import Counter
from pathlib import Path

os.environ.setdefault("WANDB_ERROR_REPORTING", "false")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
from harness.bench_rollout import EXPERIMENT, log
from harness.bench_rollout.acks import AckRecorder
from harness.bench_rollout.profiler import StepProfiler, _thread_names, by_thread_name, thread_cpu
from harness.bench_rollout.setup import compose_bench_config
from recipes.gsm8k.reward_keys import ACC, BAD_TOOL_CALLS

# ---- one phase: a manager and its workers, --steps steps ------------------------------------------------------

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
        from recipes.gsm8k.agent_loop import ScoredToolAgentLoop
        from recipes.tracing.shaping import TextOnlyTracer

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
    if ACC in nt:
        summary["correct"] = round(float(np.mean(nt[ACC])), 3)
        summary["bad_call"] = round(float(np.mean(nt[BAD_TOOL_CALLS] > 0)), 3)
    return summary


def spool_state(spool: Path) -> dict:
    segments = sorted((spool / "segments").glob("*.spool")) if (spool / "segments").is_dir() else []
    checkpoint = json.loads((spool / "checkpoint.json").read_text()) if (spool / "checkpoint.json").is_file() else {}
    return {"bytes": sum(p.stat().st_size for p in segments), "sent_records": checkpoint.get("sent", 0)}
