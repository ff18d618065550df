"""The learning check of the recipe: a synthetic arithmetic task in GSM8K's format (task.py), a small tokenizer and
model built offline (small_model.py), an SFT warm start on transcripts rendered as verl's tool agent loop renders
them (transcripts.py, sft.py), an in-process scorer (evaluate.py, turn_accuracy.py), and the pipeline that chains them
with GRPO through the recipe's own launcher (pipeline.py, `python -m harness.learning`, run by
scripts/learn_cpu.sh) and judges the outcome (verdict.py)."""
