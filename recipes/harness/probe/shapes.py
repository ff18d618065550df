"""The configurations of the models the recipe's profiles train, as their config.json files publish them (Qwen2.5's
model cards: 3B, 3.09B parameters of which 2.77B outside the embedding; 0.5B, 0.49B and 0.36B; tied embeddings), so
that random weights of exactly their shape can be made where no weights are at hand; and `tiny`, a Qwen2 of the same
family small enough for a CPU. tests/test_gpu_probe.py holds them against the published parameter counts and the
attention shapes of recipes/gpu_env/kernel_census.py."""

from __future__ import annotations

_QWEN25 = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "attention_dropout": 0.0,
           "bos_token_id": 151643, "eos_token_id": 151645, "hidden_act": "silu", "initializer_range": 0.02,
           "max_position_embeddings": 32768, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "sliding_window": 32768,
           "tie_word_embeddings": True, "torch_dtype": "bfloat16", "use_cache": True, "use_sliding_window": False,
           "vocab_size": 151936,
           # as published: without it transformers 5.9 warns that the tokenizer's regex may be wrong
           "transformers_version": "4.43.1"}

SHAPES = {
    "qwen2.5-3b": {**_QWEN25, "hidden_size": 2048, "intermediate_size": 11008, "num_hidden_layers": 36,
                   "num_attention_heads": 16, "num_key_value_heads": 2, "max_window_layers": 70},
    "qwen2.5-0.5b": {**_QWEN25, "hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24,
                     "num_attention_heads": 14, "num_key_value_heads": 2, "max_window_layers": 21},
    # head_dim 64 as the 0.5B's; the Qwen2.5 vocabulary, so the tokenizer and prompts are the real ones
    "tiny": {**_QWEN25, "hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 2,
             "num_attention_heads": 2, "num_key_value_heads": 2, "max_window_layers": 2, "torch_dtype": "float32"},
}
# the model a profile names -> its shape
OF_MODEL = {"Qwen/Qwen2.5-3B-Instruct": "qwen2.5-3b", "Qwen/Qwen2.5-0.5B-Instruct": "qwen2.5-0.5b"}


def parameters(config: dict) -> tuple[int, int]:
    """(all parameters, those outside the embedding) of a Qwen2 config: q/k/v with biases, o, the gated MLP, two norms
    a layer, the final norm; the output layer tied to the embedding."""
    hidden, inter = config["hidden_size"], config["intermediate_size"]
    head_dim = config.get("head_dim") or hidden // config["num_attention_heads"]
    q = config["num_attention_heads"] * head_dim
    kv = config["num_key_value_heads"] * head_dim
    layer = (hidden * q + q) + 2 * (hidden * kv + kv) + q * hidden + 3 * hidden * inter + 2 * hidden
    body = config["num_hidden_layers"] * layer + hidden
    embedding = config["vocab_size"] * hidden * (1 if config["tie_word_embeddings"] else 2)
    return body + embedding, body
