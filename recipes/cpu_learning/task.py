"""A synthetic arithmetic task in GSM8K's own jsonl format (`question`, `answer` ending `#### N`), from a seed.

Each problem needs one addition or subtraction of 3-digit numbers or one multiplication of 2-digit numbers: too
much for a ~1M-parameter model to do in its head, one call for the recipe's calculator. The answer field follows
GSM8K's convention (`347 + 589 = <<347+589=936>>936` then `#### 936`), so `data_prep/gsm8k.py --input_dir` reads
it as it reads GSM8K.

    python -m recipes.cpu_learning.task --out_dir /tmp/arith --train_size 4000 --test_size 256 --seed 0
"""

from __future__ import annotations

import argparse
import json
import os
import random
from dataclasses import dataclass
from pathlib import Path

NAMES = ("Ava", "Ben", "Cleo", "Dan", "Eli", "Fay", "Gus", "Ivy", "Jon", "Kim")
ITEMS = ("apples", "stamps", "coins", "shells", "cards", "books", "beads", "pens")

# (operator, question template): {a} and {b} are the operands, in this order in the expression.
TEMPLATES = (
    ("+", "{name} has {a} {item} and gets {b} more. How many {item} does {name} have now?"),
    ("+", "A shop sold {a} {item} on Monday and {b} on Tuesday. How many {item} did it sell in all?"),
    ("-", "{name} has {a} {item} and gives away {b}. How many {item} are left?"),
    ("-", "A box held {a} {item}. {name} took out {b}. How many {item} are still in the box?"),
    ("*", "{name} buys {a} packs of {item} with {b} {item} in each pack. How many {item} is that?"),
    ("*", "There are {a} rows of {item} with {b} {item} in each row. How many {item} are there?"),
)


@dataclass(frozen=True)
class Problem:
    question: str
    expression: str  # what a calculator call should send, e.g. "347 + 589"
    answer: int

    def record(self) -> dict:
        """The GSM8K jsonl record: the worked step in GSM8K's <<calc>> notation, then `#### answer`."""
        compact = self.expression.replace(" ", "")
        return {"question": self.question,
                "answer": f"{self.expression} = <<{compact}={self.answer}>>{self.answer}\n#### {self.answer}"}


def make_problem(rng: random.Random) -> Problem:
    op, template = rng.choice(TEMPLATES)
    if op == "*":
        a, b = rng.randint(12, 99), rng.randint(12, 99)
    else:
        a, b = rng.randint(100, 999), rng.randint(100, 999)
        if op == "-" and b > a:
            a, b = b, a
    answer = {"+": a + b, "-": a - b, "*": a * b}[op]
    question = template.format(name=rng.choice(NAMES), item=rng.choice(ITEMS), a=a, b=b)
    return Problem(question, f"{a} {op} {b}", answer)


def make_splits(train_size: int, test_size: int, seed: int) -> dict[str, list[Problem]]:
    """Disjoint train and test problems (no test question appears in train), deterministic in the seed."""
    rng = random.Random(seed)
    seen: set[str] = set()
    splits: dict[str, list[Problem]] = {"test": [], "train": []}
    for split, size in (("test", test_size), ("train", train_size)):
        while len(splits[split]) < size:
            problem = make_problem(rng)
            if problem.question not in seen:
                seen.add(problem.question)
                splits[split].append(problem)
    return splits


def write_jsonl(problems: list[Problem], path: Path) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text("".join(json.dumps(p.record()) + "\n" for p in problems))
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out_dir", required=True)
    p.add_argument("--train_size", type=int, default=4000)
    p.add_argument("--test_size", type=int, default=256)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    if args.train_size <= 0 or args.test_size <= 0:
        p.error("--train_size and --test_size must be positive")
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for split, problems in make_splits(args.train_size, args.test_size, args.seed).items():
        write_jsonl(problems, out / f"{split}.jsonl")
        print(f"[task] {split}: {len(problems)} problems -> {out / f'{split}.jsonl'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
