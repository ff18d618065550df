"""Launch-time helpers the launcher calls: Ray job submission for multi-node runs."""
