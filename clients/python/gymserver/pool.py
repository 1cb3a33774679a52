"""A pool of connections to one server, for processes that hold more sessions than one connection may.

The server caps the sessions of one connection (``max_sessions_per_connection``
in ``hello``'s limits, 512 by default) and of the whole server
(``--max-sessions``). A trainer worker that runs thousands of episodes at
once needs several connections; :class:`AsyncPool` opens them as needed and
places each new session on a connection with room. A session, its snapshots
and their forks stay on the connection that made them.
"""

from __future__ import annotations

import asyncio
from typing import Any, AsyncIterator, Dict, List, Mapping, Optional, Union

from .client import _NOT_SET, AsyncClient, AsyncSession
from .errors import ConnectionLost, GymServerError, ResourceExhausted
from .shapes import EnvSpec, ServerInfo, TaskSpec
from .tasks import DEFAULT_TASKS_LIMIT, MAX_TASKS_LIMIT, TaskPage

__all__ = ["AsyncPool", "DEFAULT_SESSIONS_PER_CONNECTION"]

#: DEFAULT_SESSIONS_PER_CONNECTION is used when the server's hello names no limit.
DEFAULT_SESSIONS_PER_CONNECTION = 512

#: _FULL_REASON is the error reason of a reset refused by the connection's session cap.
_FULL_REASON = "max_connection_sessions"


class AsyncPool:
    """AsyncPool is a set of :class:`~gymserver.client.AsyncClient` connections to one server.

    It has the methods of an AsyncClient that start sessions or read the
    server (``reset``, ``fork``, ``drop_snapshot``, ``hello``, ``envs``,
    ``tasks``, ``iter_tasks``, ``request``) and opens a further connection
    when every open one is at the server's per-connection session limit.
    Connections that were lost are replaced on the next ``reset``; their
    sessions fail with :class:`~gymserver.errors.ConnectionLost` as on a
    single client.

    Args:
        url: the server, as for AsyncClient.
        max_connections: at most this many connections (default 64); a
            reset beyond them raises :class:`~gymserver.errors.ResourceExhausted`.
        sessions_per_connection: sessions placed on one connection; default
            (None) is the server's ``max_sessions_per_connection``.
        options: the other AsyncClient keyword arguments (``token``,
            ``connect_timeout``, ``request_timeout``, ``parser``, ...).
    """

    def __init__(
        self,
        url: str,
        *,
        max_connections: int = 64,
        sessions_per_connection: Optional[int] = None,
        **options: Any,
    ) -> None:
        if max_connections < 1:
            raise ValueError("max_connections must be at least 1")
        self._url = url
        self._options = options
        self.max_connections = max_connections
        self.sessions_per_connection = sessions_per_connection
        self._conns: List[AsyncClient] = []
        # _placing counts resets in flight per connection (by id()), so that
        # concurrent resets do not all pick the same last free slots.
        self._placing: Dict[int, int] = {}
        self._lock: Optional[asyncio.Lock] = None
        self._closed = False

    def __repr__(self) -> str:
        return f"AsyncPool(url={self.url!r}, connections={len(self._conns)}, sessions={len(self.sessions)})"

    @property
    def url(self) -> str:
        """url is the server's WebSocket URL."""
        return self._conns[0].url if self._conns else self._url

    @property
    def token(self) -> Optional[str]:
        """token is the bearer token the connections use."""
        return self._options.get("token")

    @property
    def connected(self) -> bool:
        """connected reports whether the pool is open and one of its connections is usable."""
        return not self._closed and any(c.connected for c in self._conns)

    @property
    def connections(self) -> List[AsyncClient]:
        """connections lists the pool's open connections."""
        return [c for c in self._conns if c.connected]

    @property
    def sessions(self) -> List[AsyncSession]:
        """sessions lists the open sessions of every connection."""
        return [s for c in self._conns for s in c.sessions]

    @property
    def server_info(self) -> ServerInfo:
        """server_info is the hello result of the first connection."""
        return self._conns[0].server_info if self._conns else {}

    async def connect(self) -> "AsyncPool":
        """connect opens the first connection (so errors such as a wrong token show at once)."""
        await self._any()
        return self

    async def __aenter__(self) -> "AsyncPool":
        return await self.connect()

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def close(self, *, close_sessions: bool = True) -> None:
        """close closes every connection (and, when asked, their sessions first). Idempotent."""
        self._closed = True
        conns, self._conns = self._conns, []
        await asyncio.gather(*(c.close(close_sessions=close_sessions) for c in conns), return_exceptions=True)

    # --- placement -------------------------------------------------------

    def _guard(self) -> asyncio.Lock:
        if self._lock is None:
            self._lock = asyncio.Lock()
        return self._lock

    def _capacity(self, c: AsyncClient) -> int:
        if self.sessions_per_connection:
            return self.sessions_per_connection
        limits = c.server_info.get("limits") or {}
        return int(limits.get("max_sessions_per_connection") or DEFAULT_SESSIONS_PER_CONNECTION)

    def _load(self, c: AsyncClient) -> int:
        return len(c.sessions) + self._placing.get(id(c), 0)

    async def _open(self) -> AsyncClient:
        c = AsyncClient(self._url, **self._options)
        await c.connect()
        self._conns.append(c)
        return c

    async def _any(self) -> AsyncClient:
        """_any returns a usable connection, opening one when there is none."""
        if self._closed:
            raise ConnectionLost("pool closed")
        async with self._guard():
            self._conns = [c for c in self._conns if c.connected]
            return self._conns[0] if self._conns else await self._open()

    async def _claim(self, n: int, full: Optional[AsyncClient] = None) -> AsyncClient:
        """_claim picks the least loaded connection with room for n sessions and reserves the room."""
        if self._closed:
            raise ConnectionLost("pool closed")
        async with self._guard():
            # A lost connection leaves the pool (its sessions have failed).
            self._conns = [c for c in self._conns if c.connected]
            live = [c for c in self._conns if c is not full]
            room = [c for c in live if self._load(c) + n <= self._capacity(c)]
            if room:
                c = min(room, key=self._load)
            elif len(self._conns) < self.max_connections:
                c = await self._open()
            else:
                raise ResourceExhausted(
                    f"all {len(self._conns)} connections of the pool are full (max_connections={self.max_connections})",
                    code="resource_exhausted",
                    reason=_FULL_REASON,
                )
            self._placing[id(c)] = self._placing.get(id(c), 0) + n
            return c

    def _release(self, c: AsyncClient, n: int) -> None:
        left = self._placing.get(id(c), 0) - n
        if left > 0:
            self._placing[id(c)] = left
        else:
            self._placing.pop(id(c), None)

    def _owner(self, snapshot: Union[str, Mapping[str, Any]]) -> Optional[AsyncClient]:
        snap_id = str(snapshot.get("id") or "") if isinstance(snapshot, Mapping) else str(snapshot)
        for c in self._conns:
            if snap_id in c._snapshot_messages:
                return c
        return None

    # --- ops -------------------------------------------------------------

    async def reset(
        self,
        env: str,
        task: Optional[str] = None,
        seed: Optional[int] = None,
        options: Optional[Mapping[str, Any]] = None,
        *,
        replace: Optional[Union[AsyncSession, str]] = None,
        parser: Optional[str] = None,
        timeout: Optional[float] = _NOT_SET,
    ) -> AsyncSession:
        """reset starts an episode on a connection with room; see :meth:`AsyncClient.reset`.

        ``replace`` (an AsyncSession) is reset on its own connection.
        """
        if isinstance(replace, AsyncSession):
            return await replace.client.reset(env, task, seed, options, replace=replace, parser=parser, timeout=timeout)
        full: Optional[AsyncClient] = None
        for _ in range(2):  # the second try follows a refusal by a connection we thought had room
            c = await self._claim(1, full)
            try:
                return await c.reset(env, task, seed, options, replace=replace, parser=parser, timeout=timeout)
            except GymServerError as e:
                if getattr(e, "reason", "") != _FULL_REASON:
                    raise
                full = c
            finally:
                self._release(c, 1)
        raise ResourceExhausted("no connection of the pool has room for a session", code="resource_exhausted", reason=_FULL_REASON)

    async def reset_group(
        self,
        env: str,
        n: int,
        task: Optional[str] = None,
        seed: Optional[int] = None,
        options: Optional[Mapping[str, Any]] = None,
        *,
        parser: Optional[str] = None,
        timeout: Optional[float] = _NOT_SET,
    ) -> List[AsyncSession]:
        """reset_group starts n sessions of one task on one connection with room for all; see :meth:`AsyncClient.reset_group`."""
        full: Optional[AsyncClient] = None
        for _ in range(2):  # the second try follows a refusal by a connection we thought had room
            c = await self._claim(int(n), full)
            try:
                return await c.reset_group(env, n, task, seed, options, parser=parser, timeout=timeout)
            except GymServerError as e:
                if getattr(e, "reason", "") != _FULL_REASON:
                    raise
                full = c
            finally:
                self._release(c, int(n))
        raise ResourceExhausted(f"no connection of the pool has room for {n} sessions", code="resource_exhausted", reason=_FULL_REASON)

    async def fork(
        self,
        snapshot: Union[str, Mapping[str, Any]],
        n: int = 1,
        *,
        parser: Optional[str] = None,
        timeout: Optional[float] = _NOT_SET,
    ) -> List[AsyncSession]:
        """fork starts n sessions from a snapshot on the connection that holds it; see :meth:`AsyncClient.fork`.

        A snapshot belongs to the connection that took it, so its forks go
        there even when that connection is near its session limit (then the
        server refuses them with ``max_connection_sessions``).
        """
        c = self._owner(snapshot) or await self._any()
        return await c.fork(snapshot, n, parser=parser, timeout=timeout)

    async def drop_snapshot(self, snapshot: Union[str, Mapping[str, Any]], *, timeout: Optional[float] = _NOT_SET) -> None:
        """drop_snapshot deletes a snapshot on the connection that holds it."""
        c = self._owner(snapshot) or await self._any()
        await c.drop_snapshot(snapshot, timeout=timeout)

    async def request(self, op: str, *, timeout: Optional[float] = _NOT_SET, **fields: Any) -> Dict[str, Any]:
        """request sends one raw request on a usable connection; see :meth:`AsyncClient.request`.

        Session ops must go to the session's own connection (``session.client``).
        """
        return await (await self._any()).request(op, timeout=timeout, **fields)

    async def hello(self, *, timeout: Optional[float] = _NOT_SET) -> ServerInfo:
        """hello returns the server's versions, ops, parsers, capabilities and limits."""
        return await (await self._any()).hello(timeout=timeout)

    async def envs(self, *, timeout: Optional[float] = _NOT_SET) -> List[EnvSpec]:
        """envs lists the environments; see :meth:`AsyncClient.envs`."""
        return await (await self._any()).envs(timeout=timeout)

    async def tasks(
        self,
        env: str,
        offset: int = 0,
        limit: int = DEFAULT_TASKS_LIMIT,
        prompts: bool = True,
        *,
        timeout: Optional[float] = _NOT_SET,
    ) -> TaskPage:
        """tasks returns one page of an environment's tasks; see :meth:`AsyncClient.tasks`."""
        return await (await self._any()).tasks(env, offset, limit, prompts, timeout=timeout)

    async def iter_tasks(
        self, env: str, *, prompts: bool = True, page_size: int = MAX_TASKS_LIMIT, timeout: Optional[float] = _NOT_SET
    ) -> AsyncIterator[TaskSpec]:
        """iter_tasks yields every task of an environment; see :meth:`AsyncClient.iter_tasks`."""
        c = await self._any()
        async for t in c.iter_tasks(env, prompts=prompts, page_size=page_size, timeout=timeout):
            yield t
