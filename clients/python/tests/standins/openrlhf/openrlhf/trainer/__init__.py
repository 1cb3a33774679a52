"""Stand-in for ``openrlhf.trainer``."""
