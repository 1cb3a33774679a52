"""Stand-in for the ``llamagym`` package (LlamaGym 92d7827bc11a53441dcd6bcb4d2ddc6daeb542e0, ``llamagym/__init__.py``).

Upstream's package exports exactly one name, ``Agent``, from ``llamagym.agent``.
Tests install this package into ``sys.modules`` as ``llamagym`` before importing
``gymserver.adapters.llamagym``, so the adapter's "llamagym is installed" path runs.
"""

from .agent import Agent

__all__ = ["Agent"]
