"""Checks run before a launch uses a GPU: the config verl will see, the data, tools, reward, tracing, GPUs, keys."""
