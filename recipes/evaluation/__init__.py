"""Evaluation helpers: summarizing validation dumps, publishing them to Weave, checkpoint export."""
