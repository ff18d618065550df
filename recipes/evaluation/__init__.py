"""Evaluation helpers: scoring validation dumps, checkpoint export."""
