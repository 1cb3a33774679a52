"""gymserver: Python client for the gymserver environment server.

Quick start (sync)::

    from gymserver import Client
    with Client("ws://127.0.0.1:8080", token=None) as client:
        with client.reset("calculator_api", seed=7) as session:
            print(session.prompt, [t["function"]["name"] for t in session.tools])
            r = session.step([{"name": "execute_command", "arguments": {"command": "ls"}}])
            print(r.observation.text)

Async: :class:`AsyncClient` (many sessions on one connection, pipelined);
:class:`AsyncPool` (as many connections as the sessions need).
Many-task environments: ``client.tasks(env, offset, limit)``,
``client.iter_tasks(env)`` and :func:`seed_index` (which task a seed picks).
Gymnasium: :mod:`gymserver.gym`. GRPO groups: :mod:`gymserver.grpo`.
Reward computers and advantage estimators: :mod:`gymserver.rewards`.
The server's maps (hello, envs, snapshot, test results, ...) are typed in
:mod:`gymserver.shapes` (``TypedDict`` s, for type checkers).
Trainer adapters: :mod:`gymserver.adapters`. Wire spec: server/wire/PROTOCOL.md.
"""

from . import errors
from .client import DEFAULT_PARSER, AsyncClient, AsyncSession
from .pool import AsyncPool
from .errors import *  # noqa: F401,F403 - the exception classes and error helpers (errors.__all__)
from .results import CloseResult, Evaluation, Observation, StepResult, normalize_tool_calls
from .sync import Client, Session
from .tasks import TaskPage, seed_index

#: __version__ is the client package version.
__version__ = "0.1.0"

__all__ = [
    "AsyncClient",
    "AsyncSession",
    "AsyncPool",
    "Client",
    "Session",
    "StepResult",
    "Observation",
    "Evaluation",
    "CloseResult",
    "normalize_tool_calls",
    "TaskPage",
    "seed_index",
    "DEFAULT_PARSER",
    "__version__",
]
__all__ += errors.__all__
