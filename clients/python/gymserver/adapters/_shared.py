"""Connections shared by the adapters: one sync Client per (url, token) per process, one AsyncPool per event loop.

Both are connection pools: a process may hold more sessions than the
server allows on one connection (``max_sessions_per_connection``), and
further connections are opened as the sessions need them.
"""

from __future__ import annotations

import asyncio
import os
import threading
import weakref
from typing import Any, Dict, Mapping, Optional, Tuple

from ..pool import AsyncPool
from ..sync import Client

__all__ = [
    "resolve",
    "shared_client",
    "shared_async_client",
    "close_shared",
    "close_shared_async",
    "loop_lock",
    "episode_spec",
    "Scalar",
    "as_tensor",
]

_lock = threading.Lock()
# _clients guards nothing by itself; _lock guards it.
_clients: Dict[Tuple[str, Optional[str]], Client] = {}
_aclients: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Dict[Tuple[str, Optional[str]], AsyncPool]]" = (
    weakref.WeakKeyDictionary()
)
_alocks: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock]" = weakref.WeakKeyDictionary()


def resolve(url: Optional[str] = None, token: Optional[str] = None) -> Tuple[str, Optional[str]]:
    """resolve fills url and token from ``GYMSERVER_URL`` / ``GYMSERVER_TOKEN`` when not given."""
    u = url or os.environ.get("GYMSERVER_URL")
    if not u:
        raise ValueError("gymserver adapter: no server URL (pass url= or set GYMSERVER_URL)")
    return u, token if token is not None else (os.environ.get("GYMSERVER_TOKEN") or None)


def shared_client(url: Optional[str] = None, token: Optional[str] = None) -> Client:
    """shared_client returns the process-wide sync Client for (url, token), reconnecting a lost one."""
    key = resolve(url, token)
    with _lock:
        c = _clients.get(key)
        if c is None or not c.connected:
            if c is not None:
                c.close()
            c = Client(key[0], token=key[1], pool=True)
            _clients[key] = c
        return c


async def shared_async_client(url: Optional[str] = None, token: Optional[str] = None) -> AsyncPool:
    """shared_async_client returns the AsyncPool for (url, token) on the running loop, connecting it on first use."""
    key = resolve(url, token)
    loop = asyncio.get_running_loop()
    per_loop = _aclients.get(loop)
    if per_loop is None:
        per_loop = _aclients[loop] = {}
    async with loop_lock(_alocks):
        c = per_loop.get(key)
        if c is None or not c.connected:
            c = AsyncPool(key[0], token=key[1])
            await c.connect()
            per_loop[key] = c
        return c


async def close_shared_async() -> None:
    """close_shared_async closes the running loop's shared pools (call it before the loop ends)."""
    per_loop = _aclients.pop(asyncio.get_running_loop(), {})
    for c in per_loop.values():
        await c.close()


def close_shared() -> None:
    """close_shared closes the shared sync clients (the async ones die with their loops)."""
    with _lock:
        clients = list(_clients.values())
        _clients.clear()
    for c in clients:
        c.close()


def loop_lock(locks: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock]") -> asyncio.Lock:
    """loop_lock returns the running loop's lock in locks, making it on first use (an asyncio.Lock serves one loop)."""
    loop = asyncio.get_running_loop()
    lock = locks.get(loop)
    if lock is None:
        lock = locks[loop] = asyncio.Lock()
    return lock


#: SPEC_KEYS are the keys of a dataset row that name an episode.
SPEC_KEYS = ("env", "task", "seed", "options")


def episode_spec(*layers: Any) -> Dict[str, Any]:
    """episode_spec merges the episode keys (:data:`SPEC_KEYS`) of layers, later layers winning.

    Layers that are not mappings, and keys whose value is None, are skipped,
    so a row's nested ``gymserver`` dict can sit on top of defaults.
    """
    spec: Dict[str, Any] = {}
    for layer in layers:
        if isinstance(layer, Mapping):
            for k in SPEC_KEYS:
                if layer.get(k) is not None:
                    spec[k] = layer[k]
    return spec


class Scalar(float):
    """Scalar is a float with ``.item()``, for trainers that expect a tensor-like reward."""

    def item(self) -> float:
        """item returns the value as a plain float."""
        return float(self)


def as_tensor(value: float) -> Any:
    """as_tensor returns ``torch.tensor(value)`` when torch is importable, else a :class:`Scalar`."""
    try:
        import torch

        return torch.tensor(float(value))
    except ImportError:
        return Scalar(value)
