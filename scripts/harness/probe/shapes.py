"""The configurations of the models the recipe's profiles train, as their config.json files publish them (Qwen2.5's
model cards: 3B, 3.09B parameters of which 2.77B outside the embedding; 0.5B, 0.49B and 0.36B; tied embeddings), so
that random weights of exactly their shape can be made where no weights are at hand; and `tiny`, a Qwen2 of the same
family small enough for a CPU. tests/test_gpu_probe.py holds them against the published parameter counts and the
attention shapes of recipes/gpu_env/kernel_census.py."""

from __future__ import annotations

from recipes.models import QWEN25_CONFIGS, ModelSize

_QWEN25 = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "attention_dropout": 0.0,
           "bos_token_id": 151643, "eos_token_id": 151645, "hidden_act": "silu", "initializer_range": 0.02,
           "max_position_embeddings": 32768, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "sliding_window": 32768,
           "tie_word_embeddings": True, "torch_dtype": "bfloat16", "use_cache": True, "use_sliding_window": False,
           "vocab_size": 151936,
           # as published: without it transformers 5.9 warns that the tokenizer's regex may be wrong
           "transformers_version": "4.43.1"}

SHAPES = {  # the sizes from their one table, recipes/models.py
    "qwen2.5-3b": {**_QWEN25, **QWEN25_CONFIGS["Qwen2.5-3B"], "max_window_layers": 70},
    "qwen2.5-0.5b": {**_QWEN25, **QWEN25_CONFIGS["Qwen2.5-0.5B"], "max_window_layers": 21},
    # head_dim 64 as the 0.5B's; the Qwen2.5 vocabulary, so the tokenizer and prompts are the real ones
    "tiny": {**_QWEN25, "hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 2,
             "num_attention_heads": 2, "num_key_value_heads": 2, "max_window_layers": 2, "torch_dtype": "float32"},
}
# the model a profile names -> its shape
OF_MODEL = {"Qwen/Qwen2.5-3B-Instruct": "qwen2.5-3b", "Qwen/Qwen2.5-0.5B-Instruct": "qwen2.5-0.5b"}


def parameters(config: dict) -> tuple[int, int]:
    """(all parameters, those outside the embeddings) of a Qwen2 config, counted as the memory plan counts them."""
    size = ModelSize.from_config("probe", config)
    embeddings = size.embedding_parameters * (1 if size.tied else 2)
    return size.parameters, size.parameters - embeddings
