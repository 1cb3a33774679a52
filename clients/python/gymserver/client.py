"""The asyncio client: one WebSocket connection, many sessions, pipelined requests.

A connection has exactly one reader task, which matches responses to
requests by ``id`` (responses arrive in completion order, PROTOCOL.md §2),
and all writes go through one lock. When the connection drops, every
pending request fails at once with :class:`~gymserver.errors.ConnectionLost`
and so does every later request: nothing hangs.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import logging
from typing import Any, AsyncIterator, Deque, Dict, List, Mapping, Optional, Union, cast

from . import _wire
from .errors import (
    ConnectionLost,
    GymServerError,
    ProtocolError,
    RequestTimeout,
    error_from_wire,
    wire_error_for_http_status,
)
from .results import (
    Action,
    CloseResult,
    Evaluation,
    Message,
    StepResult,
    ToolCall,
    normalize_tool_calls,
)
from .shapes import EnvSpec, Limits, ServerInfo, SnapshotInfo, TaskSpec, ToolSchema
from .tasks import DEFAULT_TASKS_LIMIT, MAX_TASKS_LIMIT, TaskPage

__all__ = ["AsyncClient", "AsyncSession", "DEFAULT_PARSER", "CLIENT_NAME"]

log = logging.getLogger("gymserver")

#: DEFAULT_PARSER is the raw-text parser used when a step gives none.
DEFAULT_PARSER = "hermes"
#: CLIENT_NAME is what the client reports in ``hello``.
CLIENT_NAME = "gymserver-python/0.1"

#: UNMATCHED_ERRORS_KEPT bounds :attr:`AsyncClient.unmatched_errors`.
UNMATCHED_ERRORS_KEPT = 100

_NOT_SET: Any = object()


def _step_fields(session_id: str, action: Union[Action, None], parser: str) -> Dict[str, Any]:
    """_step_fields returns the fields of a step request: raw text with its parser, or tool calls."""
    if isinstance(action, str):
        return {"session": session_id, "text": action, "parser": parser}
    return {"session": session_id, "tool_calls": normalize_tool_calls(action) if action is not None else []}


class AsyncSession:
    """AsyncSession is one episode (one sandbox) on an :class:`AsyncClient`.

    It is created by :meth:`AsyncClient.reset`. Attributes mirror the reset
    result (PROTOCOL.md §4.3): ``id``, ``env``, ``task``, ``system_prompt``,
    ``prompt``, ``tools`` (OpenAI tool schemas), ``limits`` and ``messages``.
    ``messages`` starts as the initial transcript (system and user
    messages) and grows with every :meth:`step`: the assistant message of the
    action, then one ``tool`` message per call (or a ``user`` message with
    the observation text when the turn had no tool call), so it can be fed
    straight back to a chat model.

    Steps on one session run in order on the server; several sessions of
    one client run in parallel. Use it as an async context manager to close
    it on exit.
    """

    def __init__(self, client: "AsyncClient", result: Mapping[str, Any], parser: str = DEFAULT_PARSER) -> None:
        self._client = client
        self.raw: Dict[str, Any] = dict(result)
        self.id: str = str(result.get("session_id") or "")
        self.env: str = str(result.get("env") or "")
        self.task: str = str(result.get("task") or "")
        self.system_prompt: str = str(result.get("system_prompt") or "")
        self.prompt: str = str(result.get("prompt") or "")
        self.tools: List[ToolSchema] = [dict(t) for t in (result.get("tools") or []) if isinstance(t, Mapping)]  # type: ignore[misc]
        self.limits: Limits = dict(result.get("limits") or {})  # type: ignore[assignment]
        self.initial_messages: List[Message] = [dict(m) for m in (result.get("messages") or []) if isinstance(m, Mapping)]
        self.messages: List[Message] = [dict(m) for m in self.initial_messages]
        self.parser = parser
        self.last: Optional[StepResult] = None
        self.done = False
        #: group_index is the session's position in a group (set by :func:`gymserver.grpo.run_group`), else None.
        self.group_index: Optional[int] = None
        self._closed: Optional[CloseResult] = None
        self._close_lock = asyncio.Lock()

    def __repr__(self) -> str:
        return f"AsyncSession(id={self.id!r}, env={self.env!r}, task={self.task!r})"

    @property
    def client(self) -> "AsyncClient":
        """client is the connection this session belongs to."""
        return self._client

    @property
    def closed(self) -> bool:
        """closed reports whether :meth:`close` has completed."""
        return self._closed is not None

    async def step(
        self,
        action: Union[Action, None] = None,
        *,
        parser: Optional[str] = None,
        timeout: Optional[float] = _NOT_SET,
    ) -> StepResult:
        """step applies one action and returns its :class:`StepResult`.

        ``action`` is either raw model text (a ``str``, parsed on the server
        with ``parser``: ``"hermes"``, ``"json"`` or ``"react"``; default the
        session's parser) or structured tool calls: one call, a list of
        calls (OpenAI shape or flat ``{"name", "arguments"}``), or an
        assistant message with ``tool_calls``. ``None`` or ``[]`` is a turn
        without a tool call. Bad actions come back as observations with
        ``info["calls"][i]["error_class"] == "agent_error"``; a step after
        the episode ended raises :class:`~gymserver.errors.EpisodeDone`.
        """
        fields = _step_fields(self.id, action, parser or self.parser)
        content = action if isinstance(action, str) else ""
        if isinstance(action, Mapping) and isinstance(action.get("content"), str):
            content = action["content"]
        assistant: Message = {"role": "assistant", "content": content}
        res = await self._client.request("step", timeout=timeout, **fields)
        result = StepResult.from_wire(res)
        calls_out: List[ToolCall] = result.tool_calls if isinstance(action, str) else fields["tool_calls"]
        if calls_out:
            # The server assigns ids to calls without one; use them so the
            # transcript's tool messages point at the right call.
            ids = [str(c.get("id") or "") for c in (result.info.get("calls") or []) if isinstance(c, Mapping)]
            fixed = []
            for i, c in enumerate(calls_out):
                c = dict(c)
                if not c.get("id") and i < len(ids):
                    c["id"] = ids[i]
                fixed.append(c)
            assistant["tool_calls"] = fixed
        self.messages.append(assistant)
        if result.observation.messages:
            self.messages.extend(result.observation.messages)
        elif result.observation.text:
            self.messages.append({"role": "user", "content": result.observation.text})
        self.last = result
        if result.terminated or result.truncated:
            self.done = True
        return result

    async def evaluate(self, *, timeout: Optional[float] = _NOT_SET) -> Evaluation:
        """evaluate ends the episode if it is running, runs the hidden tests once and returns the verdict.

        It is idempotent: later calls return the same evaluation.
        """
        res = await self._client.request("evaluate", timeout=timeout, session=self.id)
        self.done = True
        return Evaluation.from_wire(res)

    async def snapshot(self, *, timeout: Optional[float] = _NOT_SET) -> SnapshotInfo:
        """snapshot saves the session's state while its episode runs (PROTOCOL.md §4.8).

        It returns the snapshot map (``id``, ``env``, ``task``,
        ``session_id``, ``steps``, ``actions``, ``elapsed``, ``created``);
        pass it or its ``id`` to :meth:`AsyncClient.fork`. The sandbox's
        files are saved, running processes are not. Forks made on this
        client start with this session's transcript as it is now. Raises
        :class:`~gymserver.errors.EpisodeDone` once the episode has ended.
        """
        res = await self._client.request("snapshot", timeout=timeout, session=self.id)
        snap = cast(SnapshotInfo, dict(res.get("snapshot") or {}))
        self._client._snapshot_messages[str(snap.get("id") or "")] = [dict(m) for m in self.messages]
        return snap

    async def close(self) -> CloseResult:
        """close ends the episode, removes the sandbox and returns the final record.

        It is idempotent (the first result is cached). When the connection is
        already gone the server has closed the session itself (PROTOCOL.md
        §1), so close returns a record with ``termination_reason ==
        "connection_lost"`` instead of raising.
        """
        async with self._close_lock:
            if self._closed is not None:
                return self._closed
            try:
                res = await self._client.request("close", session=self.id)
                self._closed = CloseResult.from_wire(res)
            except ConnectionLost:
                self._closed = CloseResult(session_id=self.id, env=self.env, task=self.task, termination_reason="connection_lost")
            self.done = True
            self._client._forget(self)
            return self._closed

    async def __aenter__(self) -> "AsyncSession":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()


class AsyncClient:
    """AsyncClient is an asyncio connection to a gymserver.

    Many sessions share one WebSocket; requests are pipelined and matched
    by id, so ``asyncio.gather`` over many sessions' steps runs them in
    parallel on the server.

    Args:
        url: ``ws://host:port`` (the ``/v1/ws`` path is added when missing;
            ``http://`` is accepted too).
        token: bearer token for servers that require one (default: none).
        connect_timeout: seconds to establish the connection.
        request_timeout: default seconds to wait for any response; ``None``
            (the default) waits as long as the connection lives, which suits
            long commands. Per-call ``timeout=`` overrides it.
        ping_interval, ping_timeout: client-side WebSocket heartbeats, so a
            server that vanishes without closing the TCP connection is
            detected.
        max_frame_bytes: largest response frame accepted.
        parser: default raw-text parser for sessions.

    Use ``async with AsyncClient(url) as c:`` or ``await c.connect()`` and
    ``await c.close()``. Every method must be awaited on the loop that
    connected the client.
    """

    def __init__(
        self,
        url: str,
        *,
        token: Optional[str] = None,
        connect_timeout: float = 30.0,
        request_timeout: Optional[float] = None,
        ping_interval: Optional[float] = 20.0,
        ping_timeout: Optional[float] = 20.0,
        max_frame_bytes: int = 4 * _wire.DEFAULT_MAX_FRAME_BYTES,
        parser: str = DEFAULT_PARSER,
        client_name: str = CLIENT_NAME,
    ) -> None:
        self.url = _wire.normalize_url(url)
        self.token = token
        self.connect_timeout = connect_timeout
        self.request_timeout = request_timeout
        self.ping_interval = ping_interval
        self.ping_timeout = ping_timeout
        self.max_frame_bytes = max_frame_bytes
        self.parser = parser
        self.client_name = client_name
        self.server_info: ServerInfo = {}
        self._ws: Any = None
        self._reader: Optional["asyncio.Task[None]"] = None
        self._ids = itertools.count(1)
        # _pending maps request ids to the futures of their callers; only the
        # reader task and the requesting coroutines touch it, on one loop.
        self._pending: Dict[int, "asyncio.Future[Dict[str, Any]]"] = {}
        self._send_lock: Optional[asyncio.Lock] = None
        self._lost: Optional[ConnectionLost] = None
        self._closing = False
        self._sessions: Dict[str, AsyncSession] = {}
        # _snapshot_messages holds each snapshot's transcript, for its forks.
        self._snapshot_messages: Dict[str, List[Message]] = {}
        #: unmatched_errors keeps the last UNMATCHED_ERRORS_KEPT error frames that answered no pending request.
        self.unmatched_errors: Deque[GymServerError] = collections.deque(maxlen=UNMATCHED_ERRORS_KEPT)

    def __repr__(self) -> str:
        return f"AsyncClient(url={self.url!r}, connected={self.connected})"

    @property
    def connected(self) -> bool:
        """connected reports whether the connection is open and usable."""
        return self._ws is not None and self._lost is None

    @property
    def sessions(self) -> List[AsyncSession]:
        """sessions lists the sessions opened by this client and not yet closed."""
        return list(self._sessions.values())

    async def connect(self) -> "AsyncClient":
        """connect opens the WebSocket, starts the reader task and sends ``hello``.

        Raises :class:`~gymserver.errors.Unauthenticated` for a missing or
        wrong token, :class:`~gymserver.errors.ConnectionLost` when the
        server cannot be reached, :class:`~gymserver.errors.RequestTimeout`
        when the connection or hello takes longer than ``connect_timeout``.
        """
        if self._ws is not None:
            return self
        self._send_lock = asyncio.Lock()
        try:
            self._ws = await asyncio.wait_for(
                _wire.open_connection(
                    self.url,
                    token=self.token,
                    open_timeout=self.connect_timeout,
                    ping_interval=self.ping_interval,
                    ping_timeout=self.ping_timeout,
                    max_size=self.max_frame_bytes,
                    user_agent=self.client_name,
                ),
                timeout=self.connect_timeout + 1,
            )
        except asyncio.TimeoutError as e:
            raise RequestTimeout(f"connect to {self.url}: no answer within {self.connect_timeout}s") from e
        except OSError as e:
            raise ConnectionLost(f"connect to {self.url}: {e}") from e
        except Exception as e:
            status = _wire.handshake_status(e)
            if status is not None:
                raise error_from_wire(wire_error_for_http_status(status, _wire.handshake_body(e))) from e
            if "timed out" in str(e).lower():
                raise RequestTimeout(f"connect to {self.url}: {e}") from e
            raise ConnectionLost(f"connect to {self.url}: {e}") from e
        if getattr(self._ws, "subprotocol", None) != _wire.SUBPROTOCOL:
            await self._ws.close()
            raise ProtocolError(f"server at {self.url} did not select subprotocol {_wire.SUBPROTOCOL}")
        self._reader = asyncio.ensure_future(self._read_loop())
        try:
            self.server_info = await self.hello(timeout=self.connect_timeout)
        except BaseException:
            await self.close()
            raise
        return self

    async def __aenter__(self) -> "AsyncClient":
        return await self.connect()

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def close(self, *, close_sessions: bool = True) -> None:
        """close closes the open sessions (when asked) and the connection.

        Closing the connection makes the server close every session opened
        on it anyway; closing them first returns their records and removes
        the sandboxes sooner. Idempotent.
        """
        if self._closing:
            return
        if close_sessions and self.connected:
            sessions = list(self._sessions.values())
            if sessions:
                await asyncio.gather(*(s.close() for s in sessions), return_exceptions=True)
        self._closing = True
        ws, self._ws = self._ws, None
        if ws is not None:
            try:
                await asyncio.wait_for(ws.close(), timeout=5)
            except Exception:  # the connection may already be gone
                pass
        if self._reader is not None:
            try:
                await asyncio.wait_for(asyncio.shield(self._reader), timeout=5)
            except Exception:
                self._reader.cancel()
        self._fail_all(ConnectionLost("client closed"))

    async def request(self, op: str, *, timeout: Optional[float] = _NOT_SET, **fields: Any) -> Dict[str, Any]:
        """request sends one request and returns its ``result`` map.

        It is the low-level call every method uses: ``fields`` go at the top
        level of the frame next to ``id`` and ``op``. A failed response
        raises the typed exception from :func:`~gymserver.errors.error_from_wire`.
        """
        if self._lost is not None:
            raise ConnectionLost(str(self._lost.message))
        if self._ws is None:
            raise ConnectionLost("not connected: call connect() first")
        assert self._send_lock is not None
        rid = next(self._ids)
        if rid > _wire.MAX_ID:  # pragma: no cover - 2^53 requests
            self._ids = itertools.count(1)
            rid = next(self._ids)
        frame = {"id": rid, "op": op}
        frame.update({k: v for k, v in fields.items() if v is not None})
        data = _wire.encode(frame)
        fut: "asyncio.Future[Dict[str, Any]]" = asyncio.get_running_loop().create_future()
        self._pending[rid] = fut
        try:
            async with self._send_lock:
                if self._lost is not None or self._ws is None:
                    raise ConnectionLost(self._lost.message if self._lost else "client closed")
                await self._ws.send(data)
        except Exception as e:
            self._pending.pop(rid, None)
            if fut.done():
                fut.exception()  # retrieved: the caller gets the error below
            else:
                fut.cancel()
            if isinstance(e, ConnectionLost):
                raise
            self._connection_lost(e)
            raise ConnectionLost(f"{op}: send failed: {e}") from e
        wait = self.request_timeout if timeout is _NOT_SET else timeout
        try:
            if wait is None:
                resp = await fut
            else:
                resp = await asyncio.wait_for(asyncio.shield(fut), timeout=wait)
        except asyncio.TimeoutError:
            self._pending.pop(rid, None)
            raise RequestTimeout(f"{op}: no response within {wait}s") from None
        finally:
            self._pending.pop(rid, None)
        if resp.get("ok"):
            result = resp.get("result")
            return dict(result) if isinstance(result, Mapping) else {}
        raise error_from_wire(resp.get("error"))

    # --- ops -------------------------------------------------------------

    async def hello(self, *, timeout: Optional[float] = _NOT_SET) -> ServerInfo:
        """hello returns the server's versions, ops, parsers, capabilities and limits (PROTOCOL.md §4.1)."""
        return cast(ServerInfo, await self.request("hello", timeout=timeout, client=self.client_name))

    async def envs(self, *, timeout: Optional[float] = _NOT_SET) -> List[EnvSpec]:
        """envs lists the environments: ``[{id, description, tasks, task_count, tools, snapshot}]`` sorted by id.

        ``tasks`` holds at most the first 100 tasks; ``task_count`` says how
        many there are, and :meth:`tasks` / :meth:`iter_tasks` list them all.
        """
        res = await self.request("envs", timeout=timeout)
        return [cast(EnvSpec, dict(e)) for e in (res.get("envs") or []) if isinstance(e, Mapping)]

    async def tasks(
        self,
        env: str,
        offset: int = 0,
        limit: int = DEFAULT_TASKS_LIMIT,
        prompts: bool = True,
        *,
        timeout: Optional[float] = _NOT_SET,
    ) -> TaskPage:
        """tasks returns one page of an environment's tasks (PROTOCOL.md §4.11).

        At most ``limit`` tasks (1 … 1000) from index ``offset``, in the
        order ``reset`` indexes them; ``prompts=False`` leaves the prompts
        out. Past the end the page is empty. Raises
        :class:`~gymserver.errors.NotFound` for an unknown environment and
        :class:`~gymserver.errors.InvalidArgument` for an offset or limit
        out of range.
        """
        res = await self.request(
            "tasks", timeout=timeout, env=env, offset=int(offset), limit=int(limit), prompts=None if prompts else False
        )
        return TaskPage.from_wire(res)

    async def iter_tasks(
        self,
        env: str,
        *,
        prompts: bool = True,
        page_size: int = MAX_TASKS_LIMIT,
        timeout: Optional[float] = _NOT_SET,
    ) -> AsyncIterator[TaskSpec]:
        """iter_tasks yields every task of an environment, in order, fetching pages of ``page_size`` as it goes.

        Use it as ``async for task in client.iter_tasks(env): ...``.
        """
        offset = 0
        while True:
            page = await self.tasks(env, offset, page_size, prompts, timeout=timeout)
            for t in page.tasks:
                yield t
            if page.last:
                return
            offset = page.next_offset

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
        """reset starts an episode in a new session (a new sandbox) and returns it.

        ``task`` names the task (:class:`~gymserver.errors.NotFound` when
        the environment has none of that id). Without it, ``seed`` picks one:
        the same seed, the same task, namely the one at index
        ``seed_index(seed, task_count)`` (:func:`gymserver.tasks.seed_index`);
        with neither, a random task. ``options`` are environment settings.
        ``replace`` names an open session of this client to close first
        (Gym's ``env.reset()`` on the same handle).
        """
        old_id = replace.id if isinstance(replace, AsyncSession) else replace
        res = await self.request(
            "reset",
            timeout=timeout,
            env=env,
            task=task or None,
            seed=int(seed) if seed is not None else None,
            options=dict(options) if options else None,
            session=old_id or None,
        )
        if old_id:
            self._sessions.pop(old_id, None)
            if isinstance(replace, AsyncSession):
                replace.done = True
                replace._closed = CloseResult(session_id=old_id, env=replace.env, task=replace.task, termination_reason="closed")
        session = AsyncSession(self, res, parser=parser or self.parser)
        self._sessions[session.id] = session
        return session

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
        """reset_group starts ``n`` sessions of one task and seed at once, a GRPO group (PROTOCOL.md §4.12).

        ``task`` and ``seed`` pick the task as in :meth:`reset`; with
        neither, the server picks one task for the whole group. The
        sandboxes start concurrently (from the server's warm pool when it
        has one); all start or none does.
        """
        res = await self.request(
            "reset_group",
            timeout=timeout,
            env=env,
            n=int(n),
            task=task or None,
            seed=int(seed) if seed is not None else None,
            options=dict(options) if options else None,
        )
        out: List[AsyncSession] = []
        for r in res.get("sessions") or []:
            session = AsyncSession(self, r, parser=parser or self.parser)
            self._sessions[session.id] = session
            out.append(session)
        return out

    async def fork(
        self,
        snapshot: Union[str, Mapping[str, Any]],
        n: int = 1,
        *,
        parser: Optional[str] = None,
        timeout: Optional[float] = _NOT_SET,
    ) -> List[AsyncSession]:
        """fork starts ``n`` independent sessions from a snapshot (PROTOCOL.md §4.9).

        Each continues the episode from the snapshot's step and action
        counts with the rest of its time budget. All start or none does.
        When the snapshot was taken on this client, each fork's
        ``messages`` starts with the source session's transcript at that
        point (so a model can continue it); otherwise with the initial
        messages. ``snapshot`` is the map :meth:`AsyncSession.snapshot`
        returned, or its id.
        """
        snap_id = str(snapshot.get("id") or "") if isinstance(snapshot, Mapping) else str(snapshot)
        res = await self.request("fork", timeout=timeout, snapshot=snap_id, n=int(n))
        prefix = self._snapshot_messages.get(snap_id)
        out: List[AsyncSession] = []
        for r in res.get("sessions") or []:
            session = AsyncSession(self, r, parser=parser or self.parser)
            if prefix is not None:
                session.messages = [dict(m) for m in prefix]
            self._sessions[session.id] = session
            out.append(session)
        return out

    async def drop_snapshot(self, snapshot: Union[str, Mapping[str, Any]], *, timeout: Optional[float] = _NOT_SET) -> None:
        """drop_snapshot deletes a snapshot (PROTOCOL.md §4.10); sessions forked from it go on."""
        snap_id = str(snapshot.get("id") or "") if isinstance(snapshot, Mapping) else str(snapshot)
        await self.request("drop_snapshot", timeout=timeout, snapshot=snap_id)
        self._snapshot_messages.pop(snap_id, None)

    async def session_step(
        self, session_id: str, action: Union[Action, None] = None, *, parser: Optional[str] = None
    ) -> StepResult:
        """session_step steps a session by id without a session object (no transcript is kept)."""
        return StepResult.from_wire(await self.request("step", **_step_fields(session_id, action, parser or self.parser)))

    # --- reader ----------------------------------------------------------

    def _forget(self, session: AsyncSession) -> None:
        self._sessions.pop(session.id, None)

    async def _read_loop(self) -> None:
        ws = self._ws
        try:
            while True:
                data = await ws.recv()
                try:
                    frame = _wire.decode(data)
                except ValueError as e:
                    log.warning("gymserver: dropping undecodable frame: %s", e)
                    continue
                rid = frame.get("id")
                fut = self._pending.get(rid) if isinstance(rid, int) else None
                if fut is None:
                    if not frame.get("ok", True):
                        err = error_from_wire(frame.get("error"))
                        self.unmatched_errors.append(err)
                        log.warning("gymserver: error for no pending request (id %r): %s", rid, err)
                    continue
                if not fut.done():
                    fut.set_result(frame)
        except asyncio.CancelledError:
            self._connection_lost(None)
            raise
        except Exception as e:
            self._connection_lost(e)

    def _connection_lost(self, exc: Optional[BaseException]) -> None:
        if self._lost is not None:
            return
        if self._closing:
            msg = "client closed"
        else:
            code = getattr(exc, "code", None)
            reason = getattr(exc, "reason", "") or ""
            rcvd = getattr(exc, "rcvd", None)
            if rcvd is not None:
                code, reason = getattr(rcvd, "code", code), getattr(rcvd, "reason", reason)
            detail = f"close code {code}" + (f" ({reason})" if reason else "") if code else (str(exc) or type(exc).__name__)
            msg = f"connection to {self.url} lost: {detail}"
            if code == 1001:
                msg += "; the server is shutting down"
        self._fail_all(ConnectionLost(msg))

    def _fail_all(self, err: ConnectionLost) -> None:
        if self._lost is None:
            self._lost = err
        pending, self._pending = self._pending, {}
        for fut in pending.values():
            if not fut.done():
                fut.set_exception(ConnectionLost(err.message))
        for s in self._sessions.values():
            s.done = True
