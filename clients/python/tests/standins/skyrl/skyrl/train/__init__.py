"""Stand-in for ``skyrl.train`` (SkyRL a9564572, ``skyrl/train/__init__.py`` is empty)."""
