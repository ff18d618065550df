"""A small tokenizer and a sub-1M-parameter Qwen2 model, built offline, for the learning checks.

Qwen's 151k-token vocabulary makes a tiny model almost all embedding, and verl computes full-vocabulary logits at
every position; a vocabulary of ~1k tokens cuts that cost by two orders of magnitude. The tokenizer keeps what the
recipe's path depends on: Qwen2.5's chat template (cpu_backend.qwen_tokenizer, hermes tools), its markers as added
tokens (<|im_start|>, <|im_end|>, <|endoftext|> special; <tool_call>, </tool_call>, <tool_response>,
</tool_response> plain, so they survive decode(skip_special_tokens=True) as with Qwen, where the reward reads
them), byte-level BPE (any text round-trips) and every digit a token of its own. Text identical in every
prompt (the system prompt with the tool schema, the no-tools system prompt, the instruction after each question)
is one added token each: a ~600-token rollout becomes ~120.

    python -m harness.learning.small_model --data_dir /tmp/arith_data --out_dir /tmp/arith_model
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path

from harness.qwen_tokenizer import QWEN25_CHAT_TEMPLATE
from recipes import folder_guard

SPECIAL = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
PLAIN_ADDED = ("<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>")
VOCAB_SIZE = 1024  # BPE target, added tokens included
# hidden 128, 2 layers, tied embeddings: ~0.46M parameters (2 layers: the least that learns to copy digits). 8 heads
# of 16: with 4 heads (2 of them for keys and values) the SFT stalled near a loss of 0.1, copying the first operand
# but not the second, for 4 of 6 inits; 8 heads got 2 of those inits through in the same 2000 steps.
MODEL_SHAPE = {"hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 2, "num_attention_heads": 8,
               "num_key_value_heads": 8, "max_position_embeddings": 1024}
# The GPU learning check's model (scripts/learn_gpu.sh), ~0.66M parameters: the same width, with attention SGLang's
# and FlashInfer's kernels serve. head_dim 64 (FlashInfer dispatches 64/128/256/512; 16 is refused, and `--warm-kernels`
# prebuilds FlashInfer's modules for 64), set explicitly: q/o project 128 <-> 8 x 64. 2 KV heads: a GQA group of 4,
# so SGLang decodes through FlashInfer's tensor-core module like Qwen2.5-0.5B (group 7), and its KV-cache row is
# 2 x 64 x 2 bytes = 256 like the 0.5B's: the first-use kernels are exactly the 1-GPU smoke's. On CPU it learns the
# one-step task with the CPU check's recipe unchanged (seed 0: +50 points in 20 GRPO steps).
SGLANG_SHAPE = {**MODEL_SHAPE, "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 64}
SHAPES = {"cpu": MODEL_SHAPE, "sglang": SGLANG_SHAPE}


def fixed_pieces(render, rows: list[dict]) -> list[str]:
    """Texts identical in every prompt: the tool-set system block up to the template's first <tool_call>, the
    no-tools system prompt and the instruction ending each question. Each becomes one added token."""
    from recipes.constants import INSTRUCTION
    from recipes.gsm8k.tool_sets import TOOL_SETS

    with_tools = render(rows[0]["prompt"], True)
    system_block = with_tools[len("<|im_start|>system\n"):with_tools.index("<tool_call>")]
    return [system_block, TOOL_SETS["none"].system_prompt, f" {INSTRUCTION}"]


def build_tokenizer(corpus: list[str], pieces: list[str]):
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, special_tokens=list(SPECIAL),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL])
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in (*PLAIN_ADDED, *pieces)])
    tok.train_from_iterator(corpus, trainer=trainer)
    return tok


def _wrap(tok):
    from transformers import PreTrainedTokenizerFast

    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                   bos_token=None, unk_token=None, clean_up_tokenization_spaces=False)
    fast.chat_template = QWEN25_CHAT_TEMPLATE
    return fast


def save_tokenizer(tok, folder: Path) -> None:
    _wrap(tok).save_pretrained(str(folder))


def save_model(folder: Path, tokenizer, seed: int, shape: dict | None = None) -> int:
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    vocab = -(-len(tokenizer) // 64) * 64
    config = Qwen2Config(vocab_size=vocab, tie_word_embeddings=True, torch_dtype="float32",
                         bos_token_id=tokenizer.convert_tokens_to_ids("<|endoftext|>"),
                         eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
                         **(shape or MODEL_SHAPE))
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config)
    model.save_pretrained(str(folder), safe_serialization=True)
    GenerationConfig(eos_token_id=[tokenizer.eos_token_id], pad_token_id=tokenizer.pad_token_id).save_pretrained(
        str(folder))
    return sum(p.numel() for p in model.parameters())


def build(data_dir: Path, out_dir: Path, seed: int, shape: dict | None = None) -> int:
    """Tokenizer (trained on the prepared train rows' prompts, both tool sets) and a random model, into out_dir."""
    import pyarrow.parquet as pq

    return build_from_rows(pq.read_table(data_dir / "train.parquet").to_pylist(), out_dir, seed, shape)


def build_from_rows(rows: list[dict], out_dir: Path, seed: int, shape: dict | None = None) -> int:
    from transformers import AutoTokenizer

    from recipes.gsm8k.tool_sets import TOOL_SETS, get_tool_set

    folder_guard.checked(out_dir, "small_model", "--out_dir")  # before the build: it replaces only its own

    schemas = get_tool_set("calculator").chat_schemas()
    renderer = _wrap(build_tokenizer([], []))  # the chat template alone, to render prompts as text

    def render(messages, tools):
        return renderer.apply_chat_template(messages, tools=schemas if tools else None, tokenize=False,
                                            add_generation_prompt=True)

    no_tools = TOOL_SETS["none"].system_prompt
    corpus = [render(r["prompt"], True) for r in rows]
    corpus += [render([{"role": "system", "content": no_tools}, r["prompt"][1]], False) for r in rows[:200]]
    corpus += [answer_turns(r) for r in rows]
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    try:
        save_tokenizer(build_tokenizer(corpus, fixed_pieces(render, rows)), tmp)
        params = save_model(tmp, AutoTokenizer.from_pretrained(str(tmp)), seed, shape)
        folder_guard.remove(out_dir, "small_model", "--out_dir")  # only an earlier build of it (or an empty one)
        folder_guard.mark(tmp, "small_model")
        tmp.rename(out_dir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return params


def answer_turns(row: dict) -> str:
    """Text like the assistant turns and tool responses, so their pieces get merges too."""
    from harness.learning.transcripts import scripted_turns

    *calls, final = scripted_turns(row)
    tool_turn = "<|im_end|>\n<|im_start|>user\n<tool_response>\n0\n</tool_response><|im_end|>\n"
    return "".join(call + tool_turn for call in calls) + f"{final}<|im_end|>"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data_dir", required=True, help="the output of data_prep/gsm8k.py (train.parquet)")
    p.add_argument("--out_dir", required=True)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--shape", default="cpu", choices=sorted(SHAPES),
                   help="cpu: the CPU check's (8 heads of 16); sglang: 8 heads of 64, 2 KV heads (SGLang serves it)")
    p.add_argument("--hidden_size", type=int, default=MODEL_SHAPE["hidden_size"],
                   help="width (the MLP is twice as wide); the cpu shape's 8 heads are hidden_size/8 wide")
    p.add_argument("--layers", type=int, default=MODEL_SHAPE["num_hidden_layers"])
    args = p.parse_args(argv)
    if args.hidden_size % MODEL_SHAPE["num_attention_heads"] or args.layers < 1:
        p.error(f"--hidden_size must be a multiple of {MODEL_SHAPE['num_attention_heads']} and --layers at least 1")
    shape = {**SHAPES[args.shape], "hidden_size": args.hidden_size, "intermediate_size": 2 * args.hidden_size,
             "num_hidden_layers": args.layers}
    out = Path(args.out_dir)
    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        params = build(Path(args.data_dir), out, args.seed, shape)
    except folder_guard.FolderRefused as err:
        p.error(str(err))
    print(f"[small_model] {describe(shape)}: {params:,} parameters (fp32) and tokenizer -> {out}")
    return 0


def describe(shape: dict) -> str:
    heads, kv = shape["num_attention_heads"], shape["num_key_value_heads"]
    head_dim = shape.get("head_dim") or shape["hidden_size"] // heads
    return (f"hidden {shape['hidden_size']}, {shape['num_hidden_layers']} layers, {heads} heads x {head_dim}, "
            f"{kv} KV heads")


if __name__ == "__main__":
    raise SystemExit(main())
