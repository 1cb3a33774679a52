"""AsyncPool over several servers: spreading, groups and forks on one server, a server that dies and comes back.

The same scenario runs against three fake servers and against three real
``gymserver serve`` processes (Docker); the real one also checks groups,
forks and that the killed server leaves no container behind.
"""

from __future__ import annotations

import asyncio
import signal
import urllib.request
from typing import Any, Callable, Dict, List

import pytest

import gymserver
from gymserver import AsyncPool, AsyncSession, errors
from gymserver._wire import normalize_url
from gymserver.gym import RemoteEnv
from gymserver.adapters import _shared
from conftest import LiveServer, assert_no_leftovers, start_live
from fakeserver import FakeServer

ENV = "calculator_api"


def echo(text: str) -> List[Dict[str, Any]]:
    return [{"name": "execute_command", "arguments": {"command": f"echo {text}"}}]


class Cluster:
    """Cluster is three servers of one kind that a test can kill and restart on the same address."""

    def __init__(self, start: Callable[[int], Any], url_of: Callable[[Any], str], open_of: Callable[[Any], int], kill: Callable[[Any], None]) -> None:
        self._start, self._url_of, self._open_of, self._kill = start, url_of, open_of, kill
        self.servers = [start(0) for _ in range(3)]
        self.urls = [url_of(s) for s in self.servers]
        self.killed: List[Any] = []

    def index(self, s: AsyncSession) -> int:
        """index is the number of the server a session is on."""
        return [normalize_url(u) for u in self.urls].index(s.client.url)

    def open_sessions(self, i: int) -> int:
        return self._open_of(self.servers[i])

    def kill(self, i: int) -> None:
        self._kill(self.servers[i])
        self.killed.append(self.servers[i])

    def restart(self, i: int) -> None:
        port = int(self.urls[i].rsplit(":", 1)[1].split("/")[0])
        self.servers[i] = self._start(port)


def scenario(c: Cluster, group_and_fork: bool) -> None:
    async def main() -> None:
        async with AsyncPool(c.urls, retry_min=0.2, retry_max=1.0) as pool:
            assert pool.urls == c.urls
            # one after the other: round robin over equal loads
            sessions = [await pool.reset(ENV) for _ in range(6)]
            assert [c.index(s) for s in sessions] == [0, 1, 2, 0, 1, 2]
            assert [c.open_sessions(i) for i in range(3)] == [2, 2, 2]
            # fewest sessions first
            await sessions[1].close()
            await sessions[4].close()
            s = await pool.reset(ENV)
            assert c.index(s) == 1
            sessions = [sessions[0], sessions[3], s, sessions[2], sessions[5]]  # servers 0 0 1 2 2
            extra: List[AsyncSession] = []
            if group_and_fork:
                group = await pool.reset_group(ENV, 3)
                assert [c.index(g) for g in group] == [1, 1, 1]
                snap = await sessions[3].snapshot()
                forks = await pool.fork(snap, 2)
                assert [c.index(f) for f in forks] == [2, 2]
                await pool.drop_snapshot(snap)
                assert c.open_sessions(1) == 4
                extra = group + forks
            everyone = sessions + extra
            outs = await asyncio.gather(*(s.step(echo(f"s{k}")) for k, s in enumerate(everyone)))
            for k, r in enumerate(outs):
                assert f"s{k}" in r.observation.text

            # server 1 dies mid-episode: its sessions fail with ConnectionLost, the others go on
            c.kill(1)
            await asyncio.sleep(0.3)
            for s in everyone:
                if c.index(s) == 1:
                    with pytest.raises(errors.ConnectionLost):
                        await s.step(echo("x"))
                else:
                    assert "alive" in (await s.step(echo("alive"))).observation.text
            # new sessions go to the others
            more = await asyncio.gather(*(pool.reset(ENV) for _ in range(4)))
            assert all(c.index(s) != 1 for s in more), [c.index(s) for s in more]
            status = pool.servers()[1]
            assert status["connections"] == 0 and status["error"], status
            everyone += list(more)

            # it comes back on the same address: after the backoff it takes sessions again
            c.restart(1)
            await asyncio.sleep(1.2)
            s = await pool.reset(ENV)
            assert c.index(s) == 1
            assert "back" in (await s.step(echo("back"))).observation.text
            everyone.append(s)
            for s in everyone:
                lost = not s.client.connected
                r = await s.close()
                assert (r.termination_reason == "connection_lost") == lost, (r.termination_reason, lost)
            assert [c.open_sessions(i) for i in range(3)] == [0, 0, 0]

    asyncio.run(main())

    # the sync client and the adapters' shared clients take comma-separated URLs too
    joined = ",".join(c.urls)
    with gymserver.Client(joined, pool=True) as sc:
        ss = [sc.reset(ENV) for _ in range(3)]
        assert sorted(c.index(s._inner) for s in ss) == [0, 1, 2]
        for s in ss:
            s.close()
    with pytest.raises(ValueError):
        gymserver.Client(joined)
    # a Gymnasium RemoteEnv over several servers: consecutive episodes are spread, none is left open
    env = RemoteEnv(ENV, url=joined)
    try:
        assert env.client.pooled
        placed = []
        for _ in range(3):
            env.reset()
            placed.append(c.index(env.session._inner))  # type: ignore[union-attr]
        assert sorted(placed) == [0, 1, 2], placed
        assert sum(c.open_sessions(i) for i in range(3)) == 1
    finally:
        env.close()
    assert [c.open_sessions(i) for i in range(3)] == [0, 0, 0]
    shared = _shared.shared_client(joined)
    try:
        ss = [shared.reset(ENV) for _ in range(3)]
        assert sorted(c.index(s._inner) for s in ss) == [0, 1, 2]
        for s in ss:
            s.close()
    finally:
        _shared.close_shared()


def test_pool_many_fake_servers() -> None:
    def start(port: int) -> FakeServer:
        return FakeServer(port=port).start()

    def open_of(srv: FakeServer) -> int:
        return sum(1 for s in srv.sessions.values() if not s.closed)

    c = Cluster(start, lambda s: s.url, open_of, lambda s: s.kill())
    try:
        scenario(c, group_and_fork=False)
    finally:
        for s in c.servers + c.killed:
            s.stop()


def _live_open(srv: LiveServer) -> int:
    with urllib.request.urlopen(f"http://{srv.addr}/metrics", timeout=10) as r:
        for line in r.read().decode().splitlines():
            if line.startswith("gymserver_sessions "):
                return int(float(line.split()[1]))
    raise AssertionError("/metrics has no gymserver_sessions gauge")


def test_pool_many_live_servers(live_env: Dict[str, Any]) -> None:
    def start(port: int) -> LiveServer:
        return start_live(live_env["binary"], live_env["config"], "--addr", f"127.0.0.1:{port}")

    c = Cluster(start, lambda s: s.url, _live_open, lambda s: s.stop(signal.SIGKILL))
    try:
        scenario(c, group_and_fork=True)
    finally:
        for s in c.servers:
            s.stop()
        # the killed server's janitor removes its containers
        for s in c.servers + c.killed:
            assert_no_leftovers(s.proc.pid)
