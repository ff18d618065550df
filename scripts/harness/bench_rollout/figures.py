"""The bench's figures: CPU, traces, RSS; the goals and the RESULT line."""

from __future__ import annotations

import os
from collections import Counter, defaultdict

os.environ.setdefault("WANDB_ERROR_REPORTING", "false")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
from harness.bench_rollout import PROFILE, ROLLOUT_ESTIMATE_S, TRACED_PHASE
from harness.bench_rollout.acks import AckRecorder
from harness.bench_rollout.profiler import PARTS

MAX_TURNS = 5  # the recipe's multi_turn.max_assistant_turns: the by-turns figure's columns

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
    bytes_by_key, turns_by_key = Counter(), {}
    lags = []
    for call in calls:
        acked_by_key[call["root_key"]].add(call["id"])
        bytes_by_key[call["root_key"]] += call["bytes"]
        if call["parent_id"] is None:
            roots_by_key[call["root_key"]].add(call["id"])
            turns_by_key[call["root_key"]] = call.get("turns")
        per_step[call["step"]]["calls"] += 1
        per_step[call["step"]]["bytes"] += call["bytes"]
        if call.get("ended_at"):
            lags.append(1e3 * (call["acked_at"] - call["ended_at"]))
    expected = sum(sum(s["expected_traced"]) for s in result["steps"])
    whole = [key for key, n in made_by_key.items() if len(acked_by_key.get(key, ())) >= n
             and len(roots_by_key.get(key, ())) >= 1]
    acknowledged = len(whole)
    by_turns = defaultdict(list)
    for key in whole:
        by_turns[turns_by_key.get(key)].append(bytes_by_key[key])
    twice = {i for call in calls for i in [call["id"]] if recorder.starts[i] > 1}
    duplicates = sum(1 for key, ids in roots_by_key.items() if len(ids) > 1 or ids & twice)
    lags.sort()
    return {"expected": expected, "expected_per_step": expected / len(result["steps"]),
            "made_trajectories": len(made_by_key), "made_calls": sum(made_by_key.values()),
            "acked_calls": len(calls), "acknowledged": acknowledged, "lost": expected - acknowledged,
            "duplicates": duplicates, "per_step": dict(per_step),
            "lag_p50_ms": _percentile(lags, 0.50), "lag_p99_ms": _percentile(lags, 0.99),
            "lag_max_ms": lags[-1] if lags else float("nan"),
            "bytes_per_trajectory": sum(bytes_by_key[k] for k in whole) / len(whole) if whole else float("nan"),
            "bytes_by_turns": {t: sum(b) / len(b) for t, b in sorted(by_turns.items(), key=lambda kv: kv[0] or 0)},
            "trajectories_by_turns": {t: len(b) for t, b in by_turns.items()}}


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
            print(f"bytes per traced trajectory as the endpoint acknowledged them: {tf['bytes_per_trajectory']:.0f} "
                  "(mean); by the model's turns: " + ", ".join(
                      f"{t}: {b:.0f} ({tf['trajectories_by_turns'][t]} trajectories)"
                      for t, b in tf["bytes_by_turns"].items()))
    return figures


def profile_volume(args, bytes_per_trajectory: float):
    """The traces of a step and a day at the benchmark profile's own rate (its composed config), at the measured
    bytes per trajectory."""
    from recipes.launch.knobs import Knobs, compose_launch_config
    from recipes.tracing.volume import TraceShape, volume

    shape = TraceShape.of(compose_launch_config(Knobs(profile=PROFILE, tool_set=args.tool_set)))
    return volume(shape, shape.groups_per_step(), round(bytes_per_trajectory))


def gpu_step_estimate_s() -> float:
    """The short end of the recipe's own (8xH100) step time: its one home is the config (recipe.step_time)."""
    from recipes.config_view import ConfigView
    from recipes.launch.knobs import Knobs, compose_launch_config

    return ConfigView.of(compose_launch_config(Knobs(profile="8xh100"))).step_seconds[0]


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
        gpu_step_s = gpu_step_estimate_s()
        full = goals["worker_cpu_per_trajectory_ms"] * 4096 / 1e3
        busiest = figures[TRACED_PHASE]["cpu"]["max_worker_cpu_per_step_s"]
        print(f"agent-loop worker CPU (recipe arm): {goals['worker_cpu_per_step_s']:.1f} CPU-s per step here, "
              f"{full:.0f} CPU-s per 4,096 trajectories at this per-worker load = {full / gpu_step_s:.2f} x "
              f"the {gpu_step_s:g} s estimated for a GPU step (docs/configuration.md); busiest worker "
              f"{busiest:.1f} CPU-s in a step = {busiest / ROLLOUT_ESTIMATE_S:.2f} x the {ROLLOUT_ESTIMATE_S} s "
              "estimated for its rollout")


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
    size = traced.get("bytes_per_trajectory", nan)
    by_turns = ",".join(f"{traced['bytes_by_turns'][t]:.0f}" if t in traced.get("bytes_by_turns", {}) else "-"
                        for t in range(1, MAX_TURNS + 1))
    projected = profile_volume(args, size) if size == size else None
    return (f"RESULT trajectories={trajectories} steps={args.steps} traced={traced.get('expected', 0)} "
            f"acknowledged={traced.get('acknowledged', 0)} lost_traces={traced.get('lost', 0)} "
            f"duplicate_traces={traced.get('duplicates', 0)} recipe_cpu_ratio={goals['recipe_cpu_ratio']:.3f} "
            f"trace_cpu_share={trace_share:.4f} "
            f"worker_rss_growth_mb={recipe['rss_growth_mb'] if recipe else nan:.1f} "
            f"relay_lag_p99_ms={traced.get('lag_p99_ms', nan):.0f} trace_bytes_per_trajectory={size:.0f} "
            f"trace_bytes_by_turns={by_turns} trace_mb_per_step={projected.mb_per_step if projected else nan:.2f} "
            f"trace_gb_per_day={projected.gb_per_day if projected else nan:.2f}")
