"""A CPU learning check of the recipe (issue 19): a synthetic one-step arithmetic task in GSM8K's format, a small
tokenizer and model built offline, an SFT warm start on transcripts rendered as verl's tool agent loop renders them,
and an in-process evaluator. scripts/learn_cpu.sh chains them with GRPO through the recipe's own launcher."""
