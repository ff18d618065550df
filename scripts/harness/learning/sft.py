"""SFT warm start for the learning checks: plain torch on transcripts rendered as verl's agent loop renders them
(scripts/harness/learning/transcripts.py), loss on assistant tokens only. In each transcript drawn, every step goes
through the calculator with probability --tool_fraction; at the first step that does not, the answer comes straight
away (a one-step problem: the call, or the answer at once). So the warm start uses the tool only some of the time,
and on a chain of steps it stops calling before the end more often the longer the chain: whether calling it, and
calling it for every step, pays is left for GRPO to learn. --max_depth leaves deeper problems out of the SFT.

    python -m harness.learning.sft --model_dir /tmp/m0 --data_dir /tmp/data --out_dir /tmp/m_sft --steps 600

--device cuda trains on the GPU (the GPU learning check; the same steps with other kernels: another warm start than
the CPU's of the same seed). Saves the model in fp32 with save_pretrained (and the tokenizer) into --out_dir;
--save_every N also writes <out_dir>/step_<N> folders, to choose the SFT budget by evaluating each. With
--converged_loss X it stops at the end of the tool-only phase, saves nothing and exits NOT_CONVERGED (3) when the
phase's last --log_every steps averaged a loss above X: a start that has not learned to copy the tool's result leaves
GRPO nothing to reinforce, and a fresh init does better than more steps (the learning checks restart).
"""

from __future__ import annotations

import argparse
import math
import random
import time
from collections import deque
from pathlib import Path

Example = tuple[list[int], list[int]]  # input ids, loss mask
NOT_CONVERGED = 3  # exit status: the tool-only phase ended above --converged_loss


def load_examples(model_dir: Path, data_dir: Path, max_depth: int = 0) -> tuple[object, list[list[Example]]]:
    """The tokenizer, and per train row (of at most max_depth steps; 0: all) its transcripts by number of calls:
    [0 calls (answer straight away), 1 call, ..., one call per step]."""
    import pyarrow.parquet as pq
    from transformers import AutoTokenizer

    from harness.learning.transcripts import Renderer, depth_of
    from recipes.gsm8k.tool_sets import get_tool_set

    tok = AutoTokenizer.from_pretrained(str(model_dir))
    renderer = Renderer(tok, get_tool_set("calculator").chat_schemas())
    rows = [row for row in pq.read_table(data_dir / "train.parquet").to_pylist()
            if not max_depth or depth_of(row) <= max_depth]
    if not rows:
        raise ValueError(f"{data_dir / 'train.parquet'}: no row of at most {max_depth} steps")
    return tok, [[renderer.render(row, calls) for calls in range(depth_of(row) + 1)] for row in rows]


def pick_transcripts(by_calls: list[list[Example]], tool_fraction: float, rng: random.Random) -> list[Example]:
    """Per row's transcripts (by number of calls), one: each step is a call with probability tool_fraction, up to
    the first that is not (then the answer)."""
    picked = []
    for transcripts in by_calls:
        calls = 0
        while calls < len(transcripts) - 1 and rng.random() < tool_fraction:
            calls += 1
        picked.append(transcripts[calls])
    return picked


def batch_tensors(examples, pad_id: int):
    import torch

    width = max(len(ids) for ids, _ in examples)
    ids = torch.full((len(examples), width), pad_id, dtype=torch.long)
    labels = torch.full((len(examples), width), -100, dtype=torch.long)
    attention = torch.zeros((len(examples), width), dtype=torch.long)
    for i, (tokens, mask) in enumerate(examples):
        ids[i, : len(tokens)] = torch.tensor(tokens)
        attention[i, : len(tokens)] = 1
        labels[i, : len(tokens)] = torch.tensor([t if m else -100 for t, m in zip(tokens, mask, strict=True)])
    return ids, attention, labels


def lr_at(step: int, steps: int, peak: float, warmup: int) -> float:
    if step < warmup:
        return peak * (step + 1) / warmup
    return peak * 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(1, steps - warmup)))


def train(args) -> dict:
    import torch
    from transformers import AutoModelForCausalLM

    if args.device == "cpu":
        torch.set_num_threads(args.threads)  # part of the CPU warm start's arithmetic
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    tok, examples = load_examples(Path(args.model_dir), Path(args.data_dir), args.max_depth)
    model = AutoModelForCausalLM.from_pretrained(args.model_dir, dtype=torch.float32).to(args.device)
    model.train()
    print(f"[sft] on {args.device}{f' ({torch.cuda.get_device_name()})' if args.device == 'cuda' else ''}: "
          f"{len(examples)} rows, {args.steps} steps x {args.batch_size}", flush=True)
    optim = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=args.weight_decay, betas=(0.9, 0.98),
                              foreach=True)
    out = Path(args.out_dir)
    start, order, loss_sum, tokens = time.perf_counter(), [], 0.0, 0
    recent = deque(maxlen=args.log_every)  # the last losses, for the convergence check
    for step in range(args.steps):
        if len(order) < args.batch_size:
            order += rng.sample(range(len(examples)), len(examples))
        fraction = 1.0 if step < args.tool_only_steps else args.tool_fraction
        batch = pick_transcripts([examples[i] for i in order[: args.batch_size]], fraction, rng)
        order = order[args.batch_size :]
        ids, attention, labels = (t.to(args.device) for t in batch_tensors(batch, tok.pad_token_id))
        for group in optim.param_groups:
            group["lr"] = lr_at(step, args.schedule_steps or args.steps, args.lr, args.warmup)
        loss = model(input_ids=ids, attention_mask=attention, labels=labels).loss
        optim.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optim.step()
        step_loss = loss.item()
        loss_sum, tokens = loss_sum + step_loss, tokens + int(attention.sum())
        recent.append(step_loss)
        if args.converged_loss and step + 1 == args.tool_only_steps:
            phase_loss = sum(recent) / len(recent)
            verdict = "converged" if phase_loss <= args.converged_loss else "NOT converged"
            print(f"[sft] tool-only phase: {verdict}, loss {phase_loss:.4f} over its last {len(recent)} steps "
                  f"(limit {args.converged_loss})", flush=True)
            if phase_loss > args.converged_loss:
                return {"steps": step + 1, "wall_s": time.perf_counter() - start, "converged": False,
                        "phase_loss": phase_loss}
        if (step + 1) % args.log_every == 0:
            print(f"[sft] step {step + 1}/{args.steps} loss {loss_sum / args.log_every:.4f} "
                  f"{tokens / (time.perf_counter() - start):.0f} tok/s {time.perf_counter() - start:.0f} s", flush=True)
            loss_sum = 0.0
        if args.save_every and (step + 1) % args.save_every == 0 and step + 1 < args.steps:
            save(model, tok, out / f"step_{step + 1}")
    save(model, tok, out)
    wall = time.perf_counter() - start
    print(f"[sft] {args.steps} steps x {args.batch_size} in {wall:.0f} s -> {out}", flush=True)
    return {"steps": args.steps, "wall_s": wall, "converged": True}


def save(model, tok, folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(folder), safe_serialization=True)
    tok.save_pretrained(str(folder))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model_dir", required=True, help="the random model from harness.learning.small_model")
    p.add_argument("--data_dir", required=True, help="data_prep/gsm8k.py output (train.parquet, calculator set)")
    p.add_argument("--out_dir", required=True)
    p.add_argument("--steps", type=int, default=600)
    p.add_argument("--batch_size", type=int, default=32)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--weight_decay", type=float, default=0.0,
                   help="AdamW's decoupled weight decay; the chain task's copying got past its plateau with 0.1")
    p.add_argument("--schedule_steps", type=int, default=0,
                   help="length of the cosine schedule (default --steps); longer stops before the decay ends")
    p.add_argument("--warmup", type=int, default=30)
    p.add_argument("--tool_fraction", type=float, default=1.0,
                   help="probability that a step goes through the calculator (at the first that does not, the "
                        "answer comes straight away); one-step problems: the share that call it")
    p.add_argument("--max_depth", type=int, default=0,
                   help="train only on problems of at most this many steps (0: all)")
    p.add_argument("--tool_only_steps", type=int, default=0,
                   help="steps on tool transcripts only, before --tool_fraction applies: the model learns to copy "
                        "the tool's result first (with direct answers mixed in from the start it did not)")
    p.add_argument("--converged_loss", type=float, default=0.0,
                   help="exit NOT_CONVERGED (3), saving nothing, if the tool-only phase ends above this mean loss "
                        "(0: no check)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=2, help="torch's CPU threads (--device cpu)")
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    p.add_argument("--log_every", type=int, default=50)
    p.add_argument("--save_every", type=int, default=0)
    args = p.parse_args(argv)
    if not 0.0 <= args.tool_fraction <= 1.0:
        p.error(f"--tool_fraction must be in [0, 1], not {args.tool_fraction}")
    if args.converged_loss and not 0 < args.tool_only_steps <= args.steps:
        p.error("--converged_loss judges the tool-only phase: give --tool_only_steps in 1..--steps")
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            p.error("--device cuda: torch sees no CUDA GPU here; train with --device cpu")
    return 0 if train(args)["converged"] else NOT_CONVERGED


if __name__ == "__main__":
    raise SystemExit(main())
