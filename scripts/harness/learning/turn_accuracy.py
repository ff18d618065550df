"""Which turn of a chain a warm start gets wrong: teacher-forced greedy accuracy of each assistant turn, by depth.

Each held-out problem is rendered with a call for every step (scripts/harness/learning/transcripts.py, as the agent loop
renders it); the model reads the right conversation up to each of its turns. A turn's first token is a choice
(`<tool_call>` or `####`), the rest is its content. The two are counted apart: a warm start trained to answer at once
on part of its steps may greedily choose to answer where the transcript calls, and that says nothing about whether
it would make the call right. So a turn's content counts as right when, given the transcript's first token (the
choice forced), the greedy next-token prediction matches every other token of it (the `<|im_end|>` too); the
choice is reported as the share of turns whose first token is the greedy one. No sampling and no rollout: a few
seconds on a CPU, where an evaluation through the agent loop takes minutes. A chain is only as good as its worst
turn: a warm start whose depth-3 calls are rarely right leaves GRPO little to reinforce there, whatever it learns
about calling.

    python -m harness.learning.turn_accuracy --model_dir M --data_dir D [--rows_per_depth 100]

prints one line per depth, e.g. `[turns] depth 2: all turns 0.08 | by turn 0.44 0.57 0.57 | chooses as transcribed
0.00 0.00 1.00 (n=100)`: the last turn of each is the answer (`#### N`), the ones before it the calls in order;
"all turns": every turn's content right.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from pathlib import Path

from recipes.gsm8k.trajectory import mask_runs

Predict = Callable[[list[int]], Sequence[int]]  # ids -> the greedy next token after each position


def turn_spans(mask: list[int]) -> list[range]:
    """The assistant turns of a rendered transcript: each run of loss-mask 1s."""
    return [span for by_model, span in mask_runs(mask) if by_model]


def turns_right(ids: list[int], mask: list[int], predict: Predict) -> list[tuple[bool, bool]]:
    """Per assistant turn: (its first token is the greedy prediction, every later token of it is), each from the
    transcript's tokens before it."""
    predicted = predict(ids)
    return [(predicted[span[0] - 1] == ids[span[0]], all(predicted[i - 1] == ids[i] for i in span[1:]))
            for span in turn_spans(mask)]


def by_depth(transcripts: list[tuple[int, list[int], list[int]]], predict: Predict) -> dict[int, dict]:
    """(depth, ids, mask) per problem -> per depth: problems, share with every turn's content right, share right
    per turn, share per turn whose first token (call or answer) is the greedy choice."""
    table: dict[int, dict] = {}
    for depth, ids, mask in transcripts:
        right = turns_right(ids, mask, predict)
        if len(right) != depth + 1:
            raise ValueError(f"a {depth}-step transcript has {len(right)} assistant turns, not {depth + 1}")
        row = table.setdefault(depth, {"n": 0, "all": 0, "turns": [0] * (depth + 1), "chose": [0] * (depth + 1)})
        row["n"] += 1
        row["all"] += all(content for _, content in right)
        row["turns"] = [t + content for t, (_, content) in zip(row["turns"], right, strict=True)]
        row["chose"] = [c + chose for c, (chose, _) in zip(row["chose"], right, strict=True)]
    return {d: {"n": r["n"], "all_turns": r["all"] / r["n"], "by_turn": [t / r["n"] for t in r["turns"]],
                "chooses": [c / r["n"] for c in r["chose"]]}
            for d, r in sorted(table.items())}


def model_predictor(model_dir: Path) -> Predict:
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()

    def predict(ids: list[int]) -> list[int]:
        with torch.no_grad():
            return model(input_ids=torch.tensor([ids])).logits[0].argmax(-1).tolist()

    return predict


def load_transcripts(model_dir: Path, data_dir: Path, split: str, rows_per_depth: int):
    import pyarrow.parquet as pq
    from transformers import AutoTokenizer

    from harness.learning.transcripts import Renderer, depth_of
    from recipes.gsm8k.tool_sets import get_tool_set

    renderer = Renderer(AutoTokenizer.from_pretrained(str(model_dir)), get_tool_set("calculator").chat_schemas())
    taken: dict[int, int] = {}
    out = []
    for row in pq.read_table(data_dir / f"{split}.parquet").to_pylist():
        depth = depth_of(row)
        if taken.get(depth, 0) < rows_per_depth:
            taken[depth] = taken.get(depth, 0) + 1
            out.append((depth, *renderer.render(row)))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model_dir", required=True)
    p.add_argument("--data_dir", required=True, help="data_prep/gsm8k.py output (calculator tool set)")
    p.add_argument("--split", default="test", choices=("test", "train"))
    p.add_argument("--rows_per_depth", type=int, default=100)
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)
    model_dir = Path(args.model_dir)
    table = by_depth(load_transcripts(model_dir, Path(args.data_dir), args.split, args.rows_per_depth),
                     model_predictor(model_dir))
    for depth, row in table.items():
        turns = " ".join(f"{t:.2f}" for t in row["by_turn"])
        chooses = " ".join(f"{c:.2f}" for c in row["chooses"])
        print(f"[turns] depth {depth}: all turns {row['all_turns']:.2f} | by turn {turns} | chooses as transcribed "
              f"{chooses} (n={row['n']})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
