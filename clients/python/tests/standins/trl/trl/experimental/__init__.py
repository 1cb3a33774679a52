"""Stand-in for ``trl.experimental`` (see the package docstring)."""
