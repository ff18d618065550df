"""A stall report: one folder, $OUTPUT_DIR/stall/<time>/, written whole or not at all.

    summary.md     the culprit line; when and how long nothing moved, the limit, the step and phase; the suspects
                   with their stacks; every process of every node (state, CPU over the window, memory); GPUs;
                   what could not be read
    stacks.txt     every sampled thread of every Python process, node by node (a stack the same in every sample
                   printed once, with how many samples)
    log_tail.txt   the last lines of main_ppo's output
    samples.json   all of it as sampled, for tools

The one line the launcher prints names the likely culprit (recipes/watchdog/culprit.py) and this folder.
"""

from __future__ import annotations

import json
import os
import secrets
import time
from dataclasses import dataclass
from pathlib import Path

from recipes.private_files import Folder
from recipes.watchdog.culprit import Suspect, frame_text, node_label, phase_of, suspects

SUSPECTS_SHOWN = 5
TAIL_SHOWN = 40


@dataclass
class Report:
    path: Path
    culprit: Suspect | None
    phase: str
    step: str

    def line(self) -> str:
        """The one line: the likely culprit (process and frame), the step and phase, the report's folder."""
        who = self.culprit.where() if self.culprit else "no process stayed put (every thread waits on another)"
        return f"[stall] likely culprit: {who}; {self.step}, phase {self.phase}; report: {self.path}"


def step_text(last_step: int | None) -> str:
    return "before the first training step" if last_step is None else f"in step {last_step + 1}"


def write_report(stall_dir: Path, nodes: list[dict], clock: dict, tail: list[str], errors: list[str]) -> Report:
    """Analyse the samples and write the folder. `clock`: idle_s, limit, last_what, last_step (StallWatch)."""
    ranked = suspects(nodes)
    culprit = ranked[0] if ranked else None
    report = Report(path=stall_dir / time.strftime("%Y-%m-%d_%H-%M-%S"), culprit=culprit,
                    phase=phase_of(nodes, culprit), step=step_text(clock.get("last_step")))
    errors = errors + [f"{node_label(n)}: {e}" for n in nodes for e in n.get("errors", [])]
    files = {"summary.md": _summary(report, ranked, nodes, clock, tail, errors), "stacks.txt": _stacks(nodes),
             "log_tail.txt": "\n".join(tail) + "\n",
             "samples.json": json.dumps({"clock": clock, "nodes": nodes, "errors": errors}, indent=1, default=str)}
    _write_folder(report.path, files)
    return report


def _write_folder(path: Path, files: dict[str, str]) -> None:
    """Into a hidden folder beside it, then renamed: a reader never sees half a report. Made from the parent's
    descriptor, never through a link (OUTPUT_DIR may be a folder another user can write: recipes/private_files.py)."""
    with Folder.open(path.parent, create=True) as parent:
        partial = f".{path.name}.{secrets.token_hex(4)}.partial"
        try:
            with parent.folder(partial, create=True) as folder:
                for name, text in files.items():
                    folder.write(name, text)
            name = path.name
            if name in parent.names():  # two reports in one second (STALL_ACTION=report with a tiny limit)
                name = f"{name}_{os.getpid()}_{time.monotonic_ns()}"
            os.rename(partial, name, src_dir_fd=parent.fd, dst_dir_fd=parent.fd)
        except BaseException:
            if partial in parent.names():
                parent.remove_tree(partial)
            raise


def _summary(report: Report, ranked: list[Suspect], nodes: list[dict], clock: dict, tail: list[str],
             errors: list[str]) -> str:
    lines = [f"# Stall report {report.path.name}", "", report.line(), "",
             f"- no progress for {clock['idle_s'] / 60:.1f} min; limit {clock['limit']}",
             f"- last progress: {clock['last_what']} ({clock['last_ago_s'] / 60:.1f} min before the report)",
             f"- {report.step}; the trainer's phase: {report.phase}",
             f"- sampled: {len(nodes)} node(s), {sum(len(n['processes']) for n in nodes)} processes, "
             f"{max((n['samples'] for n in nodes), default=0)} samples over "
             f"{max((n['window_s'] for n in nodes), default=0):g} s each", "",
             "## Suspects, most likely first", ""]
    if not ranked:
        lines.append("None: every sampled thread waits on something else (the stacks show what).")
    for i, suspect in enumerate(ranked[:SUSPECTS_SHOWN], 1):
        lines += [f"{i}. {suspect.where()}", ""]
        if suspect.stack:
            lines += ["   ```"] + [f"   {frame_text(f)}" for f in suspect.stack] + ["   ```", ""]
    lines += ["## Processes", "", "CPU: percent of one core across the sampling window. State: at each sample.", ""]
    for node in nodes:
        lines += [f"### {node_label(node)}", "", "| pid | ppid | state | CPU % | RSS MB | command |",
                  "|---|---|---|---|---|---|"]
        for proc in node["processes"]:
            states = ",".join(dict.fromkeys(s.get("state", "?") for s in proc["samples"]))
            lines.append(f"| {proc['pid']} | {proc['ppid']} | {states} | {proc.get('cpu_percent')} | "
                         f"{proc.get('rss_mb')} | `{proc['command'][:120]}` |")
        lines.append("")
    lines += ["## GPUs", ""]
    for node in nodes:
        seen = [g for g in node.get("gpu", []) if g.get("gpus")]
        if not seen:
            lines.append(f"- {node_label(node)}: no nvidia-smi")
            continue
        lines.append(f"- {node_label(node)} (index, name, utilization, memory used, total; then processes):")
        for sample in seen:
            lines += [f"  - t={sample['t']} s: " + "; ".join(sample["gpus"]),
                      "    processes: " + ("; ".join(sample.get("apps", [])) or "none")]
    lines += ["", "## Could not read", ""] + ([f"- {e}" for e in errors] or ["- nothing"])
    lines += ["", f"## The last {TAIL_SHOWN} lines of main_ppo's output (all kept: log_tail.txt)", "", "```",
              *tail[-TAIL_SHOWN:], "```", "", "Every thread's stacks: stacks.txt; everything as sampled: samples.json.",
              ""]
    return "\n".join(lines)


def _stacks(nodes: list[dict]) -> str:
    out = []
    for node in nodes:
        out.append(f"######## node {node_label(node)}")
        for proc in node["processes"]:
            samples = proc["samples"]
            if not proc.get("python"):
                continue
            out.append(f"\n==== pid {proc['pid']} {proc['command'][:200]}")
            failed = [s["error"] for s in samples if "error" in s]
            if failed:
                out.append(f"  (py-spy: {failed[0]})")
            stacks: dict = {}
            for sample in samples:
                for thread in sample.get("threads", []):
                    key = (thread["tid"], thread["name"])
                    stacks.setdefault(key, []).append((tuple(map(tuple, thread["frames"])), thread["active"]))
            for (tid, name), seen in stacks.items():
                out.append(f"  -- thread {tid} {name!r}")
                for frames, count in _distinct(seen):
                    out.append(f"     [{count} of {len(samples)} samples{', running' if frames[1] else ''}]")
                    out += [f"       {frame_text(list(f))}" for f in frames[0]] or ["       (no Python frame)"]
        out.append("")
    return "\n".join(out) + "\n"


def _distinct(seen: list) -> list[tuple]:
    counts: dict = {}
    for item in seen:
        counts[item] = counts.get(item, 0) + 1
    return list(counts.items())
