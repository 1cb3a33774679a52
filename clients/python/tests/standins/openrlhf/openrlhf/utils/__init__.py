"""Stand-in for ``openrlhf.utils`` (upstream imports math_utils and utils here; this one is empty)."""
