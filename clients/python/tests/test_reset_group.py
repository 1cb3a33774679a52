"""reset_group against the real server: n sessions of one task, all or none."""

import asyncio

import pytest

import gymserver
from gymserver import errors

from conftest import Backend, LiveServer, write_solution_call


def test_reset_group_async(live_server: LiveServer) -> None:
    b = Backend("live", live_server.url)

    async def main() -> None:
        async with gymserver.AsyncClient(b.url) as c:
            assert "reset_group" in (await c.hello())["ops"]
            group = await c.reset_group(b.env, 3, seed=7)
            try:
                assert len({s.id for s in group}) == 3 and len({s.task for s in group}) == 1
                assert all(s.messages == group[0].messages for s in group)
                # The sessions are independent: only the first is solved.
                await group[0].step([write_solution_call(b)])
                results = await asyncio.gather(*(s.step([{"name": "mark_done", "arguments": {}}]) for s in group))
                assert results[0].reward == pytest.approx(1.0)
                assert all(r.reward < 1.0 for r in results[1:])
            finally:
                for s in group:
                    await s.close()
            with pytest.raises(errors.NotFound):
                await c.reset_group("no-such-env", 2)
            assert not c.sessions

    asyncio.run(main())


def test_reset_group_sync_and_pool(live_server: LiveServer) -> None:
    b = Backend("live", live_server.url)
    with gymserver.Client(b.url) as c:
        group = c.reset_group(b.env, 2)
        try:
            assert len(group) == 2 and group[0].task == group[1].task and group[0].id != group[1].id
        finally:
            for s in group:
                s.close()
    with gymserver.Client(b.url, pool=True) as c:
        group = c.reset_group(b.env, 2, seed=3)
        try:
            assert len(group) == 2 and group[0].id != group[1].id
        finally:
            for s in group:
                s.close()
