"""Stand-ins for VERL (main b178a3cd56f58b2d502255daba591e92833930a7, v0.7.0 f9c855f7), for the adapter tests.

:func:`installed` puts them into ``sys.modules`` under VERL's module names
and imports ``gymserver.adapters.verl`` afresh, so the adapter takes its
"VERL installed" path; on exit it restores ``sys.modules``. The modules:

* :mod:`.agent_loop` — ``verl.experimental.agent_loop.agent_loop`` (and
  ``TokenOutput`` of ``verl.workers.rollout.replica``, ``DataProto`` of
  ``verl.protocol``): the base class, the registry, the worker that builds
  loops from the agent-loop config and post-processes the batch;
* :mod:`.tool_agent_loop` — ``ToolAgentLoop`` with its per-call tool lifecycle;
* :mod:`.tools` — ``BaseTool``, the schemas, the tool registry;
* :mod:`.hf` — a toy tokenizer/processor with transformers' ``pad`` semantics;
* :mod:`.config` — an omegaconf-like config and VERL's trainer-config subset;
* :mod:`.upstream` — loads the real upstream files from a mirror for the twin test.
"""

from __future__ import annotations

import contextlib
import importlib
import sys
import types
from typing import Any, Dict, Iterator

from . import agent_loop, tool_agent_loop, tools

ADAPTER = "gymserver.adapters.verl"


def _package(name: str, **attrs: Any) -> types.ModuleType:
    m = types.ModuleType(name)
    m.__path__ = []  # a package
    m.__dict__.update(attrs)
    return m


def modules() -> Dict[str, types.ModuleType]:
    """modules maps VERL's module names to the stand-ins."""
    return {
        "verl": _package("verl"),
        "verl.experimental": _package("verl.experimental"),
        "verl.experimental.agent_loop": _package(
            "verl.experimental.agent_loop",
            AgentLoopBase=agent_loop.AgentLoopBase,
            AgentLoopWorker=agent_loop.AgentLoopWorker,
            ToolAgentLoop=tool_agent_loop.ToolAgentLoop,
        ),
        "verl.experimental.agent_loop.agent_loop": agent_loop,
        "verl.experimental.agent_loop.tool_agent_loop": tool_agent_loop,
        "verl.tools": _package("verl.tools"),
        "verl.tools.base_tool": tools,
        "verl.tools.schemas": tools,
        "verl.tools.utils": _package("verl.tools.utils"),
        "verl.tools.utils.tool_registry": tools,
        "verl.workers": _package("verl.workers"),
        "verl.workers.rollout": _package("verl.workers.rollout"),
        "verl.workers.rollout.replica": agent_loop,
        "verl.protocol": agent_loop,
    }


@contextlib.contextmanager
def with_modules(mods: Dict[str, types.ModuleType]) -> Iterator[types.ModuleType]:
    """with_modules installs mods into sys.modules, yields a fresh import of the adapter and restores everything on exit."""
    names = list(mods) + [ADAPTER]
    saved = {n: sys.modules.get(n) for n in names}
    import gymserver.adapters as pkg

    saved_attr = pkg.__dict__.get("verl")
    try:
        sys.modules.pop(ADAPTER, None)
        sys.modules.update(mods)
        yield importlib.import_module(ADAPTER)
    finally:
        for n, m in saved.items():
            if m is None:
                sys.modules.pop(n, None)
            else:
                sys.modules[n] = m
        if saved_attr is None:
            pkg.__dict__.pop("verl", None)
        else:
            pkg.verl = saved_attr  # type: ignore[attr-defined]


def installed() -> "contextlib.AbstractContextManager[types.ModuleType]":
    """installed installs the stand-ins and yields the adapter module imported against them."""
    return with_modules(modules())
