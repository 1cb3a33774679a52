"""A pool of connections to one or more servers, for processes that hold more sessions than one connection may.

The server caps the sessions of one connection (``max_sessions_per_connection``
in ``hello``'s limits, 512 by default) and of the whole server
(``--max-sessions``). A trainer worker that runs thousands of episodes at
once needs several connections; :class:`AsyncPool` opens them as needed and
places each new session on a connection with room. A session, its snapshots
and their forks stay on the connection that made them.

Given several server URLs (a list, or one string of comma-separated URLs,
as in ``GYMSERVER_URL=ws://a:8080,ws://b:8080``), the pool spreads sessions
over the servers: a new session goes to the server with the fewest open
sessions of this pool (ties go round robin), a group (``reset_group``)
goes to one server as a whole, and forks go to the server (the connection)
that holds the snapshot. A server that goes away fails its sessions with
:class:`~gymserver.errors.ConnectionLost`; new sessions then go to the
other servers, and the lost one is tried again after a backoff
(``retry_min`` seconds, doubling up to ``retry_max``).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, AsyncIterator, Dict, List, Mapping, Optional, Sequence, Union

from .client import _NOT_SET, AsyncClient, AsyncSession
from .errors import ConnectionLost, GymServerError, RequestTimeout, ResourceExhausted
from .shapes import EnvSpec, ServerInfo, TaskSpec
from .tasks import DEFAULT_TASKS_LIMIT, MAX_TASKS_LIMIT, TaskPage

__all__ = ["AsyncPool", "DEFAULT_SESSIONS_PER_CONNECTION", "split_urls"]

#: DEFAULT_SESSIONS_PER_CONNECTION is used when the server's hello names no limit.
DEFAULT_SESSIONS_PER_CONNECTION = 512

#: _FULL_REASON is the error reason of a reset refused by the connection's session cap.
_FULL_REASON = "max_connection_sessions"


def split_urls(url: Union[str, Sequence[str]]) -> List[str]:
    """split_urls returns the server URLs of a list, or of a string of comma-separated URLs."""
    items = url.split(",") if isinstance(url, str) else list(url)
    urls = [u.strip() for u in items if u and u.strip()]
    if not urls:
        raise ValueError("no server URL")
    return urls


class _Server:
    """_Server is one server of a pool: its connections and, after failures to reach it, when to try again."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.conns: List[AsyncClient] = []
        self.failures = 0
        self.retry_at = 0.0
        self.last_error: Optional[BaseException] = None

    def prune(self) -> None:
        """prune drops the connections that were lost (their sessions have failed)."""
        self.conns = [c for c in self.conns if c.connected]


class AsyncPool:
    """AsyncPool is a set of :class:`~gymserver.client.AsyncClient` connections to one or more servers.

    It has the methods of an AsyncClient that start sessions or read the
    server (``reset``, ``fork``, ``drop_snapshot``, ``hello``, ``envs``,
    ``tasks``, ``iter_tasks``, ``request``) and opens a further connection
    when every open one is at the server's per-connection session limit.
    Connections that were lost are replaced on the next ``reset``; their
    sessions fail with :class:`~gymserver.errors.ConnectionLost` as on a
    single client. With several servers, see the module documentation for
    how sessions are spread and what happens when a server goes away.

    Args:
        url: the server, as for AsyncClient; or several: a list of URLs or
            one string of comma-separated URLs.
        max_connections: at most this many connections per server (default
            64); a reset beyond them raises
            :class:`~gymserver.errors.ResourceExhausted`.
        sessions_per_connection: sessions placed on one connection; default
            (None) is the server's ``max_sessions_per_connection``.
        retry_min, retry_max: seconds a server that could not be reached
            is left alone before the next try; the wait doubles with each
            failure from retry_min up to retry_max.
        options: the other AsyncClient keyword arguments (``token``,
            ``connect_timeout``, ``request_timeout``, ``parser``, ...).
    """

    def __init__(
        self,
        url: Union[str, Sequence[str]],
        *,
        max_connections: int = 64,
        sessions_per_connection: Optional[int] = None,
        retry_min: float = 1.0,
        retry_max: float = 30.0,
        **options: Any,
    ) -> None:
        if max_connections < 1:
            raise ValueError("max_connections must be at least 1")
        self._servers = [_Server(u) for u in split_urls(url)]
        self._options = options
        self.max_connections = max_connections
        self.sessions_per_connection = sessions_per_connection
        self.retry_min = retry_min
        self.retry_max = max(retry_max, retry_min)
        # _placing counts resets in flight per connection (by id()), so that
        # concurrent resets do not all pick the same last free slots.
        self._placing: Dict[int, int] = {}
        self._next = 0  # where the round robin over equally loaded servers starts
        self._lock: Optional[asyncio.Lock] = None
        self._closed = False

    def __repr__(self) -> str:
        return f"AsyncPool(urls={self.urls!r}, connections={len(self._conns)}, sessions={len(self.sessions)})"

    @property
    def _conns(self) -> List[AsyncClient]:
        return [c for srv in self._servers for c in srv.conns]

    @property
    def url(self) -> str:
        """url is the WebSocket URL of the first server."""
        for srv in self._servers:
            if srv.conns:
                return srv.conns[0].url
        return self._servers[0].url

    @property
    def urls(self) -> List[str]:
        """urls lists the servers' URLs as given."""
        return [srv.url for srv in self._servers]

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
        conns = self._conns
        return conns[0].server_info if conns else {}

    def servers(self) -> List[Dict[str, Any]]:
        """servers describes each server: ``url``, ``connections``, ``sessions``, ``error`` and ``retry_in`` (seconds) while it is down."""
        now = time.monotonic()
        out = []
        for srv in self._servers:
            srv.prune()
            down = not srv.conns and srv.last_error is not None
            out.append(
                {
                    "url": srv.url,
                    "connections": len(srv.conns),
                    "sessions": sum(len(c.sessions) for c in srv.conns),
                    "error": str(srv.last_error) if down else None,
                    "retry_in": max(0.0, srv.retry_at - now) if down else 0.0,
                }
            )
        return out

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
        conns = self._conns
        for srv in self._servers:
            srv.conns = []
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

    async def _open(self, srv: _Server) -> AsyncClient:
        """_open opens a connection to srv; a failure to reach it starts its backoff."""
        c = AsyncClient(srv.url, **self._options)
        try:
            await c.connect()
        except (ConnectionLost, RequestTimeout) as e:
            srv.failures += 1
            srv.last_error = e
            srv.retry_at = time.monotonic() + min(self.retry_max, self.retry_min * 2 ** (srv.failures - 1))
            raise
        srv.failures, srv.last_error = 0, None
        srv.conns.append(c)
        return c

    def _candidates(self) -> List[_Server]:
        """_candidates lists the servers to try, fewest sessions first, ties in round-robin order.

        A server without a connection is left out while its backoff runs.
        """
        now = time.monotonic()
        n = len(self._servers)
        order = [self._servers[(self._next + k) % n] for k in range(n)]
        for srv in order:
            srv.prune()
        usable = [srv for srv in order if srv.conns or srv.retry_at <= now]
        return sorted(usable, key=lambda srv: sum(self._load(c) for c in srv.conns))  # stable: ties keep the order

    def _no_server(self) -> ConnectionLost:
        down = "; ".join(f"{srv.url}: {srv.last_error}" for srv in self._servers if srv.last_error is not None)
        return ConnectionLost(f"no server of the pool is reachable ({down or 'no server'})")

    async def _any(self) -> AsyncClient:
        """_any returns a usable connection, opening one when there is none."""
        if self._closed:
            raise ConnectionLost("pool closed")
        async with self._guard():
            for srv in self._servers:
                srv.prune()
                if srv.conns:
                    return srv.conns[0]
            for srv in self._candidates():
                try:
                    return await self._open(srv)
                except (ConnectionLost, RequestTimeout):
                    continue
            raise self._no_server()

    async def _claim(self, n: int, full: Optional[AsyncClient] = None) -> AsyncClient:
        """_claim picks a connection with room for n sessions and reserves the room.

        The server is the one with the fewest sessions (ties round robin)
        that has a connection with room or may open one; on it, the least
        loaded connection with room.
        """
        if self._closed:
            raise ConnectionLost("pool closed")
        async with self._guard():
            candidates = self._candidates()
            exhausted = False
            for srv in candidates:
                live = [c for c in srv.conns if c is not full]
                room = [c for c in live if self._load(c) + n <= self._capacity(c)]
                if room:
                    c = min(room, key=self._load)
                elif len(srv.conns) < self.max_connections:
                    try:
                        c = await self._open(srv)
                    except (ConnectionLost, RequestTimeout):
                        continue  # the server is down: the next one
                else:
                    exhausted = True
                    continue
                self._next = (self._servers.index(srv) + 1) % len(self._servers)
                self._placing[id(c)] = self._placing.get(id(c), 0) + n
                return c
            if exhausted:
                raise ResourceExhausted(
                    f"all connections of the pool are full (max_connections={self.max_connections} per server)",
                    code="resource_exhausted",
                    reason=_FULL_REASON,
                )
            raise self._no_server()

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

        ``replace`` (an AsyncSession) is reset on its own connection. A
        reset whose connection is lost under it is tried once more (on
        another server when its own is gone).
        """
        if isinstance(replace, AsyncSession):
            return await replace.client.reset(env, task, seed, options, replace=replace, parser=parser, timeout=timeout)
        full: Optional[AsyncClient] = None
        for attempt in range(2):  # the second try follows a refusal by a connection we thought had room, or a lost one
            c = await self._claim(1, full)
            try:
                return await c.reset(env, task, seed, options, replace=replace, parser=parser, timeout=timeout)
            except ConnectionLost:
                if attempt or self._closed or c.connected:
                    raise
                full = None
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
        """reset_group starts n sessions of one task on one connection with room for all; see :meth:`AsyncClient.reset_group`.

        The group goes to one server as a whole, the one with the fewest sessions.
        """
        full: Optional[AsyncClient] = None
        for attempt in range(2):  # the second try follows a refusal by a connection we thought had room, or a lost one
            c = await self._claim(int(n), full)
            try:
                return await c.reset_group(env, n, task, seed, options, parser=parser, timeout=timeout)
            except ConnectionLost:
                if attempt or self._closed or c.connected:
                    raise
                full = None
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
