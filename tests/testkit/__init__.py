"""Offline stand-ins used by tests and benchmarks: each module says what real thing it replaces."""
