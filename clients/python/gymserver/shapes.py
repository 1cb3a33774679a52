"""Typed shapes of the server's maps (PROTOCOL.md §4), for type checkers.

At run time every one of them is a plain ``dict``: these ``TypedDict`` s
only name the keys the server sends and their types, so an editor or mypy
can check code that reads them. All are ``total=False``: a key the server
leaves out (an optional field, or an older server) is simply absent.
"""

from __future__ import annotations

from typing import Any, Dict, List, TypedDict

__all__ = [
    "Limits",
    "ServerInfo",
    "ToolFunction",
    "ToolSchema",
    "TaskSpec",
    "EnvSpec",
    "CallInfo",
    "TestCase",
    "CommandResult",
    "SnapshotInfo",
]


class Limits(TypedDict, total=False):
    """Limits are a server's limits (``hello``, §5) or an episode's bounds (``reset``)."""

    max_frame_bytes: int
    max_sessions: int
    max_sessions_per_connection: int
    max_inflight_per_connection: int
    max_concurrent_resets: int
    max_snapshots_per_connection: int
    max_queued_bytes_per_connection: int
    reset_wait: float
    idle_session_ttl: float
    ping_interval: float
    max_depth: int
    max_actions: int
    global_timeout: float
    command_timeout: float


class ServerInfo(TypedDict, total=False):
    """ServerInfo is the result of ``hello`` (§4.1)."""

    server: str
    server_version: str
    protocol: int
    subprotocol: str
    instance: str
    ops: List[str]
    parsers: List[str]
    capabilities: List[str]
    limits: Limits
    draining: bool


class ToolFunction(TypedDict, total=False):
    """ToolFunction is the ``function`` part of a tool schema."""

    name: str
    description: str
    parameters: Dict[str, Any]


class ToolSchema(TypedDict, total=False):
    """ToolSchema is one tool in OpenAI's shape (§4.7 Tool)."""

    type: str
    function: ToolFunction


class TaskSpec(TypedDict, total=False):
    """TaskSpec describes one task of an environment (§4.7)."""

    id: str
    prompt: str
    test_commands: int
    has_reference: bool
    metadata: Dict[str, Any]


class EnvSpec(TypedDict, total=False):
    """EnvSpec describes one environment (``envs``, §4.2 and §4.7)."""

    id: str
    description: str
    tasks: List[TaskSpec]
    task_count: int
    tools: List[ToolSchema]
    snapshot: bool


class CallInfo(TypedDict, total=False):
    """CallInfo is one call of a step (``info["calls"]``, §4.4)."""

    id: str
    name: str
    exit_code: int
    duration: float
    error_class: str
    error: str
    output_dropped: int
    blocked: bool
    tool_timeout: bool


class TestCase(TypedDict, total=False):
    """TestCase is one hidden test's verdict (``Evaluation.tests``, §4.7)."""

    name: str
    status: str
    message: str
    command: int


class CommandResult(TypedDict, total=False):
    """CommandResult is one unit-test command's run (``Evaluation.commands``, §4.7)."""

    command: str
    exit_code: int
    output: str
    duration: float
    timed_out: bool
    source: str
    success: bool


class SnapshotInfo(TypedDict, total=False):
    """SnapshotInfo is the result of ``snapshot`` (§4.8)."""

    id: str
    env: str
    task: str
    session_id: str
    steps: int
    actions: int
    elapsed: float
    created: float
    mode: str
    fallback: str
    bytes: int
