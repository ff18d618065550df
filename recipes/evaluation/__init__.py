"""Evaluation helpers: scoring validation dumps, publishing them to Weave, checkpoint export."""
