"""Stand-in for ``trl.trainer`` (see the package docstring)."""
