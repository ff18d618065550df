"""PNG plots of the per-step aggregates and per-prompt accuracy (matplotlib, no display needed)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

PANELS = [
    ("reward", "mean reward"), ("accuracy", "accuracy"), ("tool_call_rate", "rollouts calling a tool"),
    ("response_chars", "response length (characters)"),
]


def plot_steps(series: dict[str, list[dict]], out: Path, floor: float) -> Path:
    """One panel per metric; one line per dump folder (train rollouts, validation)."""
    fig, axes = plt.subplots(2, 2, figsize=(11, 7), constrained_layout=True)
    for ax, (key, title) in zip(axes.flat, PANELS, strict=True):
        for label, steps in series.items():
            ax.plot([s["step"] for s in steps], [s[key] for s in steps], marker="o", label=label)
        if key == "tool_call_rate":
            ax.axhline(floor, color="red", linestyle="--", linewidth=1, label=f"collapse alarm ({floor:.0%})")
        if key in ("accuracy", "tool_call_rate"):
            ax.set_ylim(-0.02, 1.02)
        _finish(ax, title, legend_size=8)
    return _save(fig, out / "steps.png")


def plot_ops(series: dict[str, dict[int, list[dict]]], out: Path) -> Path:
    """Accuracy and tool calls per rollout by step, one line per number of reference operations (`ref_ops`) and
    dump folder: does the model learn the longer chains, and call the tool once per step?"""
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8), constrained_layout=True)
    for ax, (key, title) in zip(axes, (("accuracy", "accuracy by operations needed"),
                                       ("tool_calls_per_rollout", "tool calls per rollout by operations needed")),
                                strict=True):
        for label, by_ops in series.items():
            for ops, steps in by_ops.items():
                ax.plot([s["step"] for s in steps], [s[key] for s in steps], marker="o" if label == "validation"
                        else None, linestyle=":" if label == "validation" else "-", label=f"{label}, {ops} ops")
        if key == "accuracy":
            ax.set_ylim(-0.02, 1.02)
        _finish(ax, title, legend_size=7)
    return _save(fig, out / "by_ops.png")


def _finish(ax, title: str, legend_size: int) -> None:
    """What every by-step panel has: its title, integer steps on x, a light grid, a legend."""
    ax.set_title(title)
    ax.set_xlabel("training step")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=legend_size)


def _save(fig, path: Path) -> Path:
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_prompts(per_prompt: dict[str, dict[int, float]], prompts: list[str], out: Path) -> Path:
    fig, ax = plt.subplots(figsize=(11, 0.5 * len(prompts) + 2.5), constrained_layout=True)
    steps = sorted({s for p in prompts for s in per_prompt[p]})
    grid = [[per_prompt[p].get(s, float("nan")) for s in steps] for p in prompts]
    image = ax.imshow(grid, aspect="auto", cmap="RdYlGn", vmin=0, vmax=1)
    ax.set_xticks(range(len(steps)), [str(s) for s in steps])
    ax.set_yticks(range(len(prompts)), [_short(p) for p in prompts], fontsize=8)
    ax.set_xlabel("step")
    ax.set_title("accuracy per prompt (share of its rollouts that were right)")
    fig.colorbar(image, ax=ax, fraction=0.03)
    path = out / "prompts.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _short(prompt: str) -> str:
    text = prompt.split("user\n")[-1].replace("\n", " ").strip()
    return text[:70] + ("…" if len(text) > 70 else "")
