"""A synthetic arithmetic task in GSM8K's own jsonl format (`question`, `answer` ending `#### N`), from a seed.

The one-step task (`--task one_step`, the default): each problem needs one addition or subtraction of 3-digit
numbers or one multiplication of 2-digit numbers: too much for a ~0.5M-parameter model to do in its head, one call
for the recipe's calculator. The chain task (`--task chain`): each problem needs 1, 2 or 3 operations in a row,
each on the previous one's result ("... gets 589 more. Then Ava gives away 212. ..."), so a model that calls the
calculator must carry each result into its next call, as GSM8K's steps do; both splits hold the depths in turn
(equal shares). The answer field follows GSM8K's convention, one line per step (`347 + 589 = <<347+589=936>>936`,
`936 - 212 = <<936-212=724>>724`) then `#### 724`, so `data_prep/gsm8k.py --input_dir` reads it as it reads GSM8K.

    python -m harness.learning.task --out_dir /tmp/arith --train_size 4000 --test_size 256 --seed 0
    python -m harness.learning.task --task chain --out_dir /tmp/chain --train_size 6000 --test_size 300
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

# The chain task: a first sentence with two operands, then one sentence per further step with one operand, which
# applies to the result so far; then the question. {c} is the step's operand.
CHAIN_START = {
    "+": "{name} has {a} {item} and gets {b} more.",
    "-": "{name} has {a} {item} and gives away {b}.",
    "*": "{name} buys {a} packs of {item} with {b} {item} in each pack.",
}
CHAIN_THEN = {
    "+": ("Then {name} gets {c} more.", "Then {name} finds {c} more."),
    "-": ("Then {name} gives away {c}.", "Then {name} sells {c}."),
    "*": ("Then {name} ends up with {c} times as many.",),
}
CHAIN_QUESTION = "How many {item} does {name} have now?"
TASKS = {"one_step": (1,), "chain": (1, 2, 3)}  # the depths (operations per problem) each task holds


@dataclass(frozen=True)
class Problem:
    question: str
    steps: tuple[tuple[str, int], ...]  # per operation: what a calculator call should send ("347 + 589"), its value

    @property
    def answer(self) -> int:
        return self.steps[-1][1]

    @property
    def depth(self) -> int:
        return len(self.steps)

    def record(self) -> dict:
        """The GSM8K jsonl record: each step in GSM8K's <<calc>> notation on its own line, then `#### answer`."""
        lines = [f"{expression} = <<{expression.replace(' ', '')}={value}>>{value}" for expression, value in self.steps]
        return {"question": self.question, "answer": "\n".join(lines) + f"\n#### {self.answer}"}


def _operands(rng: random.Random, op: str) -> tuple[int, int]:
    """Two 2-digit numbers to multiply, or two 3-digit ones to add or subtract (the larger first)."""
    if op == "*":
        return rng.randint(12, 99), rng.randint(12, 99)
    a, b = rng.randint(100, 999), rng.randint(100, 999)
    return (b, a) if op == "-" and b > a else (a, b)


def make_problem(rng: random.Random) -> Problem:
    op, template = rng.choice(TEMPLATES)
    a, b = _operands(rng, op)
    answer = {"+": a + b, "-": a - b, "*": a * b}[op]
    question = template.format(name=rng.choice(NAMES), item=rng.choice(ITEMS), a=a, b=b)
    return Problem(question, ((f"{a} {op} {b}", answer),))


def _apply(op: str, x: int, y: int) -> int:
    return {"+": x + y, "-": x - y, "*": x * y}[op]


def make_chain_problem(rng: random.Random, depth: int) -> Problem:
    """depth operations, each after the first on the result so far; every value stays positive and below ~11,000
    (a product only of a result under 1000, by 2-9; a subtraction only of less than the result)."""
    op = rng.choice(tuple(CHAIN_START))
    a, b = _operands(rng, op)
    name, item = rng.choice(NAMES), rng.choice(ITEMS)
    value = _apply(op, a, b)
    steps, sentences = [(f"{a} {op} {b}", value)], [CHAIN_START[op].format(name=name, item=item, a=a, b=b)]
    for _ in range(depth - 1):
        ops = ["+"] + (["-"] if value > 100 else []) + (["*"] if value < 1000 else [])
        op = rng.choice(ops)
        c = rng.randint(2, 9) if op == "*" else rng.randint(100, min(999, value - 1) if op == "-" else 999)
        steps.append((f"{value} {op} {c}", _apply(op, value, c)))
        sentences.append(rng.choice(CHAIN_THEN[op]).format(name=name, c=c))
        value = steps[-1][1]
    sentences.append(CHAIN_QUESTION.format(name=name, item=item))
    return Problem(" ".join(sentences), tuple(steps))


def make_splits(train_size: int, test_size: int, seed: int, task: str = "one_step") -> dict[str, list[Problem]]:
    """Disjoint train and test problems (no test question appears in train), deterministic in the seed; the
    chain task's depths in turn (1, 2, 3, 1, ...) in each split."""
    depths = TASKS[task]
    rng = random.Random(seed)
    seen: set[str] = set()
    splits: dict[str, list[Problem]] = {"test": [], "train": []}
    for split, size in (("test", test_size), ("train", train_size)):
        while len(splits[split]) < size:
            depth = depths[len(splits[split]) % len(depths)]
            problem = make_problem(rng) if task == "one_step" else make_chain_problem(rng, depth)
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
    p.add_argument("--task", default="one_step", choices=tuple(TASKS), help="one_step: one operation per problem; "
                   "chain: 1, 2 or 3 operations in a row, equal shares")
    p.add_argument("--train_size", type=int, default=4000)
    p.add_argument("--test_size", type=int, default=256)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    if args.train_size <= 0 or args.test_size <= 0:
        p.error("--train_size and --test_size must be positive")
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for split, problems in make_splits(args.train_size, args.test_size, args.seed, args.task).items():
        write_jsonl(problems, out / f"{split}.jsonl")
        print(f"[task] {split}: {len(problems)} problems -> {out / f'{split}.jsonl'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
