"""Many-task environments: task listing, reset by task id and by seed, against a real ``gymserver serve``."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from pathlib import Path
from typing import Any, Dict, Iterator, List

import pytest

import gymserver
from gymserver import errors
from conftest import LiveServer, start_live

ENV = "arith"
# (id, operator): task i asks for op(a, b) in op.py.
OPS = [("add", "+"), ("sub", "-"), ("mul", "*"), ("floordiv", "//"), ("mod", "%")]


def test_seed_index_pinned() -> None:
    # The values PROTOCOL.md §4.3 works through; the server computes the same.
    assert gymserver.seed_index(0, 1000) == 535
    assert gymserver.seed_index(42, 7) == 5
    assert gymserver.seed_index(0, 1) == 0
    # Negative seeds are two's complement; extremes of int64 are valid.
    assert 0 <= gymserver.seed_index(-1, 10) < 10
    assert 0 <= gymserver.seed_index(-(1 << 63), 3) < 3
    for bad in ((1, 0), (1, -5), (1 << 63, 10)):
        with pytest.raises(ValueError):
            gymserver.seed_index(*bad)


def _task(tid: str, op: str, i: int) -> Dict[str, Any]:
    return {
        "id": tid,
        "prompt": f"Make {tid}(a, b) in {tid}.py return a {op} b.",
        "files": {f"{tid}.py": f"def {tid}(a, b):\n    raise NotImplementedError\n"},
        "hidden_files": {f"tests/test_{tid}.py": f"from {tid} import {tid}\n\ndef test_it():\n    assert {tid}(7, 3) == 7 {op} 3\n"},
        "reference_solution": {"contents": {f"{tid}.py": f"def {tid}(a, b):\n    return a {op} b\n"}},
        "metadata": {"op": op, "index": i, "tags": ["arith"], "weight": 0.5},
    }


@pytest.fixture(scope="module")
def many_server(live_env: Dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """many_server is a real server with one environment of five inline tasks."""
    cfg = {
        "environments": [
            {
                "id": ENV,
                "docker_image": "gymserver/python:3.11-bookworm",
                "unit_tests": ["python3 -m pytest -q tests/"],
                "tasks": [_task(tid, op, i) for i, (tid, op) in enumerate(OPS)],
            }
        ]
    }
    path = tmp_path_factory.mktemp("many") / "config.json"
    path.write_text(json.dumps(cfg, indent=2))
    srv = start_live(live_env["binary"], path)
    with gymserver.Client(srv.url) as c:
        instance = c.server_info["instance"]
    try:
        yield srv
    finally:
        srv.stop()
        # Only this server's containers: other tests may run servers too.
        deadline = time.monotonic() + 60
        left = _containers(instance)
        while left and time.monotonic() < deadline:
            time.sleep(0.5)
            left = _containers(instance)
        assert not left, f"containers of server {instance} left behind: {left}"


def _containers(instance: str) -> List[str]:
    out = subprocess.run(
        ["docker", "ps", "-a", "-q", "--filter", f"label=gymserver.owner={instance}"], capture_output=True, text=True, timeout=60
    )
    return out.stdout.split()


def test_envs_shows_task_count(many_server: LiveServer) -> None:
    with gymserver.Client(many_server.url) as c:
        env = next(e for e in c.envs() if e["id"] == ENV)
        assert env["task_count"] == len(OPS)
        assert [t["id"] for t in env["tasks"]] == [tid for tid, _ in OPS]
        # Metadata arrives as the config wrote it: integers stay integers.
        assert env["tasks"][3]["metadata"] == {"op": "//", "index": 3, "tags": ["arith"], "weight": 0.5}
        assert env["tasks"][0]["has_reference"] and env["tasks"][0]["test_commands"] == 1


def test_tasks_paging(many_server: LiveServer) -> None:
    ids = [tid for tid, _ in OPS]
    with gymserver.Client(many_server.url) as c:
        page = c.tasks(ENV, offset=1, limit=2)
        assert (page.env, page.total, page.offset) == (ENV, len(OPS), 1)
        assert [t["id"] for t in page.tasks] == ids[1:3]
        assert page.tasks[0]["prompt"] == "Make sub(a, b) in sub.py return a - b."
        assert not page.last and page.next_offset == 3
        last = c.tasks(ENV, offset=3)  # default limit: the rest
        assert [t["id"] for t in last.tasks] == ids[3:] and last.last
        for offset in (len(OPS), 1000):  # past the end: empty, total still known
            past = c.tasks(ENV, offset=offset, limit=10)
            assert past.tasks == [] and past.total == len(OPS) and past.last
        bare = c.tasks(ENV, limit=2, prompts=False)
        assert [t["id"] for t in bare.tasks] == ids[:2]
        assert all(not t.get("prompt") for t in bare.tasks) and bare.tasks[1]["metadata"]["op"] == "-"
        # iter_tasks pages on until the end.
        assert [t["id"] for t in c.iter_tasks(ENV, page_size=2)] == ids
        with pytest.raises(errors.NotFound) as ei:
            c.tasks("no_such_env")
        assert ei.value.reason == "unknown_env"
        for bad in ({"limit": 1001}, {"limit": -1}, {"offset": -1}):
            with pytest.raises(errors.InvalidArgument):
                c.tasks(ENV, **bad)


def test_tasks_async(many_server: LiveServer) -> None:
    async def main() -> None:
        async with gymserver.AsyncClient(many_server.url) as c:
            page = await c.tasks(ENV, 0, 1)
            assert [t["id"] for t in page.tasks] == ["add"] and page.total == len(OPS)
            got = [t["id"] async for t in c.iter_tasks(ENV, page_size=3, prompts=False)]
            assert got == [tid for tid, _ in OPS]

    asyncio.run(main())


def test_reset_by_task_and_seed(many_server: LiveServer) -> None:
    with gymserver.Client(many_server.url) as c:
        tasks = list(c.iter_tasks(ENV))
        n = len(tasks)
        with c.reset(ENV, task="mul") as s:
            assert s.task == "mul" and s.prompt == tasks[2]["prompt"]
            r = s.step([{"name": "execute_command", "arguments": {"command": "cat mul.py"}}])
            assert "def mul(a, b)" in r.observation.text
        seen = set()
        for seed in (0, 42, -7, 123456789):
            want = tasks[gymserver.seed_index(seed, n)]["id"]
            got = []
            for _ in range(2):
                with c.reset(ENV, seed=seed) as s:
                    got.append(s.task)
            assert got == [want, want], f"seed {seed}"
            seen.add(want)
        assert len(seen) > 1  # the seeds do not all pick one task
        with pytest.raises(errors.NotFound):
            c.reset(ENV, task="no_such_task")
