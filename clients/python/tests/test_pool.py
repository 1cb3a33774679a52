"""AsyncPool: a process holds more sessions than one connection may, on the fake and the real server."""

from __future__ import annotations

import asyncio
from typing import Any, Dict, List

import pytest

import gymserver
from gymserver import AsyncClient, AsyncPool, errors
from conftest import Backend, start_live, wait_no_sessions
from fakeserver import FakeServer


def echo(text: str) -> List[Dict[str, Any]]:
    return [{"name": "execute_command", "arguments": {"command": f"echo {text}"}}]


def test_pool_holds_1200_sessions_over_3_connections() -> None:
    srv = FakeServer(max_sessions_per_connection=512).start()
    try:

        async def main() -> None:
            # One connection really is capped at 512: the 513th reset is refused.
            async with AsyncClient(srv.url) as one:
                await asyncio.gather(*(one.reset("calculator_api") for _ in range(512)))
                with pytest.raises(errors.ResourceExhausted) as ei:
                    await one.reset("calculator_api")
                assert ei.value.reason == "max_connection_sessions"

            async with AsyncPool(srv.url) as pool:
                sessions = await asyncio.gather(*(pool.reset("calculator_api", seed=i) for i in range(1200)))
                assert len({s.id for s in sessions}) == 1200
                conns = pool.connections
                assert len(conns) == 3
                assert sorted(len(c.sessions) for c in conns) == [176, 512, 512]
                # every connection's sessions work
                for c in conns:
                    r = await c.sessions[0].step(echo("hi"))
                    assert "hi" in r.observation.text
                # closing frees room: the next reset goes to an existing connection
                await asyncio.gather(*(s.close() for s in sessions[:10]))
                s = await pool.reset("calculator_api")
                assert len(pool.connections) == 3 and s.client in conns
            assert sum(1 for s in srv.sessions.values() if not s.closed) == 0

        asyncio.run(main())
    finally:
        srv.stop()


def test_pool_replaces_a_lost_connection() -> None:
    srv = FakeServer(max_sessions_per_connection=2).start()
    try:

        async def main() -> None:
            async with AsyncPool(srv.url, max_connections=2) as pool:
                a, b, c, d = await asyncio.gather(*(pool.reset("calculator_api") for _ in range(4)))
                assert len(pool.connections) == 2
                with pytest.raises(errors.ResourceExhausted):
                    await pool.reset("calculator_api")  # 2 connections x 2 sessions
                lost = a.client
                await lost._ws.close()
                await asyncio.sleep(0.2)
                with pytest.raises(errors.ConnectionLost):
                    await a.step(echo("x"))
                # the lost connection is replaced; the other one keeps its sessions
                more = await asyncio.gather(*(pool.reset("calculator_api") for _ in range(2)))
                assert all(s.client.connected and s.client is not lost for s in more)
                assert lost not in pool.connections and len(pool.connections) == 2
                assert (await a.close()).termination_reason == "connection_lost"
                survivor = next(s for s in (b, c, d) if s.client is not lost)
                r = await survivor.step(echo("still"))
                assert "still" in r.observation.text

        asyncio.run(main())
    finally:
        srv.stop()


def test_sync_client_pool(backend: Backend) -> None:
    with gymserver.Client(backend.url, pool=True, sessions_per_connection=2) as c:
        sessions = [c.reset(backend.env) for _ in range(5)]
        assert isinstance(c.async_client, AsyncPool) and len(c.async_client.connections) == 3
        for s in sessions:
            assert "ok" in s.step(echo("ok")).observation.text
    wait_no_sessions(backend)


def test_pool_live_server_limit(live_env: Dict[str, Any]) -> None:
    """The real server's per-connection cap (here 2) is read from hello; forks stay on their connection."""
    srv = start_live(live_env["binary"], live_env["config"], "--max-sessions-per-conn", "2")
    b = Backend("live", srv.url)
    try:

        async def main() -> None:
            async with AsyncPool(srv.url) as pool:
                sessions = await asyncio.gather(*(pool.reset("calculator_api", seed=i) for i in range(3)))
                assert len(pool.connections) == 2
                for s in sessions:
                    assert s.client.server_info["limits"]["max_sessions_per_connection"] == 2
                outs = await asyncio.gather(*(s.step(echo(s.id)) for s in sessions))
                for s, r in zip(sessions, outs):
                    assert s.id in r.observation.text
                # the session alone on its connection is snapshotted; its fork joins it there
                lone = next(s for s in sessions if len(s.client.sessions) == 1)
                snap = await lone.snapshot()
                (forked,) = await pool.fork(snap, 1)
                assert forked.client is lone.client
                await pool.drop_snapshot(snap)
                assert (await forked.step(echo("forked"))).observation.text.count("forked") >= 1
            wait_no_sessions(b)

        asyncio.run(main())
    finally:
        srv.stop()


def test_unmatched_errors_are_bounded(live_server: Any) -> None:
    """Error frames answering no request (the real server's answer to an undecodable frame) are kept, but only the last UNMATCHED_ERRORS_KEPT."""
    from gymserver.client import UNMATCHED_ERRORS_KEPT

    async def main() -> None:
        async with AsyncClient(live_server.url) as c:
            for _ in range(UNMATCHED_ERRORS_KEPT + 50):
                await c._ws.send(b"\xc1")  # never-valid msgpack: the server answers with id 0
            await c.hello()
            assert len(c.unmatched_errors) == UNMATCHED_ERRORS_KEPT
            assert c.unmatched_errors[-1].code == "invalid_argument"

    asyncio.run(main())
