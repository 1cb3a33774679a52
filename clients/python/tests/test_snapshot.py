"""Snapshot and fork against the real server (the fake server has no snapshots)."""

import asyncio

import pytest

import gymserver
from gymserver import errors

from conftest import Backend, LiveServer, write_solution_call


def test_snapshot_fork_async(live_server: LiveServer) -> None:
    b = Backend("live", live_server.url)

    async def main() -> None:
        async with gymserver.AsyncClient(b.url) as c:
            hello = await c.hello()
            assert "snapshot" in hello["capabilities"] and "fork" in hello["ops"]
            async with await c.reset(b.env) as s:
                await s.step([write_solution_call(b)])
                snap = await s.snapshot()
                assert snap["id"] and snap["session_id"] == s.id and snap["steps"] == 1 and snap["actions"] == 1
                kept, broken = await c.fork(snap, 2)
                try:
                    assert kept.id != broken.id != s.id
                    # A fork continues the source's transcript and counts.
                    assert kept.messages == s.messages and kept.raw["fork_of"] == snap["id"] and kept.raw["steps"] == 1
                    await broken.step([{"name": "execute_command", "arguments": {"command": "rm app.py"}}])
                    good, bad = await asyncio.gather(
                        kept.step([{"name": "mark_done", "arguments": {}}]),
                        broken.step([{"name": "mark_done", "arguments": {}}]),
                    )
                    assert good.reward == pytest.approx(1.0) and bad.reward < 1.0 and not bad.mask
                    assert good.info["step"] == 2
                finally:
                    await kept.close()
                    await broken.close()
                await c.drop_snapshot(snap)
                with pytest.raises(errors.NotFound):
                    await c.fork(snap["id"])
                # The source session is untouched by its forks.
                r = await s.step([{"name": "execute_command", "arguments": {"command": "test -f app.py && echo present"}}])
                assert "present" in r.observation.text
                # After the end, no snapshot: the hidden tests may be in the sandbox.
                await s.step([{"name": "mark_done", "arguments": {}}])
                with pytest.raises(errors.EpisodeDone):
                    await s.snapshot()

    asyncio.run(main())


def test_snapshot_fork_sync(live_server: LiveServer) -> None:
    b = Backend("live", live_server.url)
    with gymserver.Client(b.url) as c:
        with c.reset(b.env) as s:
            s.step([write_solution_call(b)])
            snap = s.snapshot()
            forks = c.fork(snap["id"], 3)
            try:
                rewards = [f.step([{"name": "mark_done", "arguments": {}}]).reward for f in forks]
                assert rewards == [pytest.approx(1.0)] * 3
            finally:
                for f in forks:
                    f.close()
            c.drop_snapshot(snap)
