"""The synchronous client: the async client driven from a private event loop thread.

:class:`Client` owns one background thread running one asyncio loop with one
:class:`~gymserver.client.AsyncClient`. Every call is submitted to that loop
with :func:`asyncio.run_coroutine_threadsafe`, so a Client is safe to use
from several threads at once (their requests are pipelined on the one
connection) and from code that is already inside a running event loop
(a Jupyter cell, an async trainer calling sync env code): the caller's loop
is never touched.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from typing import Any, Awaitable, Dict, Generic, Iterator, List, Mapping, Optional, Sequence, TypeVar, Union, overload

from .client import _NOT_SET, AsyncClient, AsyncSession
from .errors import ConnectionLost
from .pool import AsyncPool
from .shapes import EnvSpec, Limits, ServerInfo, SnapshotInfo, TaskSpec, ToolSchema
from .results import Action, CloseResult, Evaluation, Message, StepResult
from .tasks import DEFAULT_TASKS_LIMIT, MAX_TASKS_LIMIT, TaskPage

__all__ = ["Client", "Session"]

T = TypeVar("T")


class _Mirror(Generic[T]):
    """_Mirror is a read-only Session attribute that reads the attribute of the same name of the AsyncSession."""

    def __init__(self, doc: str) -> None:
        self.__doc__ = doc
        self._name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self._name = name

    @overload
    def __get__(self, obj: None, owner: Optional[type] = None) -> "_Mirror[T]": ...

    @overload
    def __get__(self, obj: "Session", owner: Optional[type] = None) -> T: ...

    def __get__(self, obj: Any, owner: Optional[type] = None) -> Any:
        return self if obj is None else getattr(obj._inner, self._name)

    def __set__(self, obj: Any, value: Any) -> None:
        raise AttributeError(f"can't set attribute {self._name!r}")


class Session:
    """Session is the synchronous view of one episode; see :class:`~gymserver.client.AsyncSession`.

    Attributes mirror the reset result: ``id``, ``env``, ``task``,
    ``system_prompt``, ``prompt``, ``tools``, ``limits``, ``messages`` (the
    running transcript). Use it as a context manager to close it on exit.
    """

    id: _Mirror[str] = _Mirror("id is the server's session id.")
    env: _Mirror[str] = _Mirror("env is the environment id.")
    task: _Mirror[str] = _Mirror("task is the task id.")
    system_prompt: _Mirror[str] = _Mirror("system_prompt is the environment's system prompt.")
    prompt: _Mirror[str] = _Mirror("prompt is the task prompt.")
    tools: _Mirror[List[ToolSchema]] = _Mirror("tools are the OpenAI tool schemas the agent may call.")
    limits: _Mirror[Limits] = _Mirror("limits are the episode bounds: max_actions, global_timeout, command_timeout.")
    messages: _Mirror[List[Message]] = _Mirror("messages is the running chat transcript (initial messages plus every step).")
    initial_messages: _Mirror[List[Message]] = _Mirror("initial_messages is the transcript the reset returned.")
    done: _Mirror[bool] = _Mirror("done reports whether the episode has ended (or the session is closed).")
    last: _Mirror[Optional[StepResult]] = _Mirror("last is the most recent step result, None before the first step.")
    raw: _Mirror[Dict[str, Any]] = _Mirror("raw is the full reset result map.")

    def __init__(self, client: "Client", inner: AsyncSession) -> None:
        self._client = client
        self._inner = inner

    def __repr__(self) -> str:
        return f"Session(id={self.id!r}, env={self.env!r}, task={self.task!r})"

    @property
    def async_session(self) -> AsyncSession:
        """async_session is the underlying :class:`AsyncSession` (use it on :attr:`Client.loop` only)."""
        return self._inner

    def step(self, action: Union[Action, None] = None, *, parser: Optional[str] = None, timeout: Optional[float] = _NOT_SET) -> StepResult:
        """step applies one action (raw text or tool calls); see :meth:`AsyncSession.step`."""
        return self._client._run(self._inner.step(action, parser=parser, timeout=timeout))

    def evaluate(self, *, timeout: Optional[float] = _NOT_SET) -> Evaluation:
        """evaluate ends the episode and returns the hidden tests' verdict (idempotent)."""
        return self._client._run(self._inner.evaluate(timeout=timeout))

    def snapshot(self, *, timeout: Optional[float] = _NOT_SET) -> SnapshotInfo:
        """snapshot saves the session's state; see :meth:`AsyncSession.snapshot`."""
        return self._client._run(self._inner.snapshot(timeout=timeout))

    def close(self) -> CloseResult:
        """close ends the episode and removes the sandbox (idempotent)."""
        if self._inner.closed:
            return self._inner._closed  # type: ignore[return-value]
        if self._client._loop_gone():
            return CloseResult(session_id=self.id, env=self.env, task=self.task, termination_reason="connection_lost")
        return self._client._run(self._inner.close())

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class Client:
    """Client is a synchronous, thread-safe connection to a gymserver.

    It takes the same arguments as :class:`~gymserver.client.AsyncClient`
    (``url`` and the keyword-only ``token``, ``connect_timeout``,
    ``request_timeout``, ``ping_interval``, ``ping_timeout``,
    ``max_frame_bytes``, ``parser``, ``client_name``) and connects in the
    constructor. Use it as a context manager, or call
    :meth:`close` when done (it closes open sessions, the connection and the
    loop thread).

    With ``pool=True`` it holds an :class:`~gymserver.pool.AsyncPool`
    instead of one connection: new sessions go to further connections when
    one is at the server's per-connection session limit (``max_connections``,
    ``sessions_per_connection``, ``retry_min`` and ``retry_max`` are then
    accepted as well), and ``url`` may name several servers (a list, or
    comma-separated URLs) over which sessions are spread.
    """

    def __init__(self, url: Union[str, Sequence[str]], *, pool: bool = False, **options: Any) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="gymserver-client", daemon=True)
        self._thread.start()
        self._closed = False
        self._lock = threading.Lock()
        try:
            if pool:
                self._aclient: Union[AsyncClient, AsyncPool] = AsyncPool(url, **options)
            elif isinstance(url, str) and "," not in url:
                self._aclient = AsyncClient(url, **options)
            else:
                raise ValueError("several server URLs need pool=True")
            self._run(self._aclient.connect())
        except BaseException:
            self._stop_loop()
            raise

    def __repr__(self) -> str:
        return f"Client(url={self.url!r}, connected={self.connected})"

    @property
    def url(self) -> str:
        """url is the server's WebSocket URL."""
        return self._aclient.url

    @property
    def connected(self) -> bool:
        """connected reports whether the connection is open and usable."""
        return not self._closed and self._aclient.connected

    @property
    def pooled(self) -> bool:
        """pooled reports whether the client holds a pool (``pool=True``) rather than one connection."""
        return isinstance(self._aclient, AsyncPool)

    @property
    def server_info(self) -> ServerInfo:
        """server_info is the hello result received when connecting."""
        return self._aclient.server_info

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """loop is the client's private event loop (running in its own thread)."""
        return self._loop

    @property
    def async_client(self) -> Union[AsyncClient, AsyncPool]:
        """async_client is the underlying :class:`AsyncClient` (or AsyncPool); only use it on :attr:`loop`."""
        return self._aclient

    def run(self, coro: Awaitable[T]) -> T:
        """run executes a coroutine on the client's loop and returns its result (blocking).

        Useful to drive :attr:`async_client` (for example a GRPO group) from
        synchronous code.
        """
        return self._run(coro)

    def submit(self, coro: Awaitable[T]) -> "concurrent.futures.Future[T]":
        """submit schedules a coroutine on the client's loop and returns a concurrent future."""
        if self._loop_gone():
            _discard(coro)
            raise ConnectionLost("client closed")
        return asyncio.run_coroutine_threadsafe(coro, self._loop)  # type: ignore[arg-type]

    def hello(self) -> ServerInfo:
        """hello returns the server's versions, ops, parsers, capabilities and limits."""
        return self._run(self._aclient.hello())

    def envs(self) -> List[EnvSpec]:
        """envs lists the environments with their first 100 tasks, task_count and tools."""
        return self._run(self._aclient.envs())

    def tasks(
        self,
        env: str,
        offset: int = 0,
        limit: int = DEFAULT_TASKS_LIMIT,
        prompts: bool = True,
        *,
        timeout: Optional[float] = _NOT_SET,
    ) -> TaskPage:
        """tasks returns one page of an environment's tasks; see :meth:`AsyncClient.tasks`."""
        return self._run(self._aclient.tasks(env, offset, limit, prompts, timeout=timeout))

    def iter_tasks(
        self, env: str, *, prompts: bool = True, page_size: int = MAX_TASKS_LIMIT, timeout: Optional[float] = _NOT_SET
    ) -> Iterator[TaskSpec]:
        """iter_tasks yields every task of an environment, in order, fetching one page at a time."""
        offset = 0
        while True:
            page = self.tasks(env, offset, page_size, prompts, timeout=timeout)
            yield from page.tasks
            if page.last:
                return
            offset = page.next_offset

    def reset(
        self,
        env: str,
        task: Optional[str] = None,
        seed: Optional[int] = None,
        options: Optional[Mapping[str, Any]] = None,
        *,
        replace: Optional[Union[Session, str]] = None,
        parser: Optional[str] = None,
        timeout: Optional[float] = _NOT_SET,
    ) -> Session:
        """reset starts an episode in a new session; see :meth:`AsyncClient.reset`."""
        rep: Any = replace._inner if isinstance(replace, Session) else replace
        inner = self._run(self._aclient.reset(env, task, seed, options, replace=rep, parser=parser, timeout=timeout))
        return Session(self, inner)

    def reset_group(
        self,
        env: str,
        n: int,
        task: Optional[str] = None,
        seed: Optional[int] = None,
        options: Optional[Mapping[str, Any]] = None,
        *,
        parser: Optional[str] = None,
        timeout: Optional[float] = _NOT_SET,
    ) -> List[Session]:
        """reset_group starts ``n`` sessions of one task and seed; see :meth:`AsyncClient.reset_group`."""
        inner = self._run(self._aclient.reset_group(env, n, task, seed, options, parser=parser, timeout=timeout))
        return [Session(self, s) for s in inner]

    def fork(
        self,
        snapshot: Union[str, Mapping[str, Any]],
        n: int = 1,
        *,
        parser: Optional[str] = None,
        timeout: Optional[float] = _NOT_SET,
    ) -> List[Session]:
        """fork starts ``n`` sessions from a snapshot; see :meth:`AsyncClient.fork`."""
        inner = self._run(self._aclient.fork(snapshot, n, parser=parser, timeout=timeout))
        return [Session(self, s) for s in inner]

    def drop_snapshot(self, snapshot: Union[str, Mapping[str, Any]], *, timeout: Optional[float] = _NOT_SET) -> None:
        """drop_snapshot deletes a snapshot; see :meth:`AsyncClient.drop_snapshot`."""
        self._run(self._aclient.drop_snapshot(snapshot, timeout=timeout))

    def request(self, op: str, **fields: Any) -> Dict[str, Any]:
        """request sends one raw request and returns its result map; see :meth:`AsyncClient.request`."""
        return self._run(self._aclient.request(op, **fields))

    def close(self) -> None:
        """close closes the open sessions, the connection and the loop thread. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        try:
            if not self._loop_gone():
                fut = asyncio.run_coroutine_threadsafe(self._aclient.close(), self._loop)
                try:
                    fut.result(timeout=60)
                except Exception:
                    pass
        finally:
            self._stop_loop()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:  # pragma: no cover - best effort
        try:
            if not self._closed and self._loop.is_running():
                self._loop.call_soon_threadsafe(self._loop.stop)
        except Exception:
            pass

    # --- internals -------------------------------------------------------

    def _loop_gone(self) -> bool:
        return self._loop.is_closed() or not self._thread.is_alive()

    def _run(self, coro: Awaitable[T]) -> T:
        if threading.current_thread() is self._thread:
            _discard(coro)
            raise RuntimeError("gymserver.Client: blocking call from the client's own loop thread; use async_client")
        fut = self.submit(coro)
        try:
            return fut.result()
        except concurrent.futures.CancelledError as e:
            raise ConnectionLost("request cancelled: client closed") from e
        except KeyboardInterrupt:
            fut.cancel()
            raise

    def _stop_loop(self) -> None:
        if self._loop.is_closed():
            return

        async def _drain() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in tasks:
                t.cancel()
            if tasks:
                await asyncio.gather(*tasks, return_exceptions=True)

        if self._thread.is_alive():
            try:
                asyncio.run_coroutine_threadsafe(_drain(), self._loop).result(timeout=10)
            except Exception:
                pass
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)
        if not self._thread.is_alive():
            self._loop.close()


def _discard(coro: Awaitable[Any]) -> None:
    """_discard closes a coroutine that will never run, so Python does not warn that it was never awaited."""
    close = getattr(coro, "close", None)
    if close:
        close()
