"""Client tests, each run against the fake server and the real ``gymserver serve``."""

from __future__ import annotations

import asyncio
import json
import signal
import threading
import time
from typing import Any, List

import pytest

import gymserver
from gymserver import errors
from conftest import SOLUTION, Backend, start_live, write_solution_call
from fakeserver import FakeServer


def echo_call(text: str, call_id: str = "") -> dict:
    return {"id": call_id, "type": "function", "function": {"name": "execute_command", "arguments": json.dumps({"command": f"echo {text}"})}}


def test_hello_and_envs(backend: Backend) -> None:
    with gymserver.Client(backend.url) as c:
        info = c.server_info
        assert info["protocol"] == 1
        assert info["subprotocol"] == "gymserver.v1+msgpack"
        assert set(info["parsers"]) >= {"hermes", "json", "react"}
        envs = c.envs()
        ids = [e["id"] for e in envs]
        assert ids == sorted(ids) and "calculator_api" in ids and "fix_inventory" in ids
        calc = next(e for e in envs if e["id"] == "calculator_api")
        names = {t["function"]["name"] for t in calc["tools"]}
        assert {"execute_command", "write_file", "read_file", "mark_done"} <= names


def test_reference_solution_gets_reward_one(backend: Backend) -> None:
    async def main() -> None:
        async with gymserver.AsyncClient(backend.url) as c:
            async with await c.reset(backend.env, seed=7) as s:
                assert s.id and s.env == backend.env and s.task
                assert s.prompt and "calculator" in s.prompt.lower()
                assert [m["role"] for m in s.messages][-1] == "user"
                assert {t["function"]["name"] for t in s.tools} >= {"write_file", "mark_done"}
                r1 = await s.step([write_solution_call(backend)])
                assert not r1.terminated and r1.reward == 0.0
                assert r1.observation.messages[0]["tool_call_id"] == "w1"
                assert r1.info["calls"][0]["name"] == "write_file"
                r2 = await s.step([{"name": "mark_done", "arguments": {}}])
                assert r2.terminated and not r2.truncated
                assert r2.reward == pytest.approx(1.0)
                assert r2.evaluation is not None and r2.evaluation.success and r2.evaluation.total > 0
                assert r2.termination_reason == "completed"
                assert not r2.mask
                ev = await s.evaluate()  # idempotent: same verdict
                assert ev.reward == pytest.approx(1.0)
                with pytest.raises(errors.EpisodeDone) as ei:
                    await s.step([])
                assert ei.value.code == "episode_done" and not ei.value.mask
                # transcript: initial + (assistant, tool) x 2
                roles = [m["role"] for m in s.messages]
                assert roles[-4:] == ["assistant", "tool", "assistant", "tool"]
            closed = await s.close()  # idempotent after the context manager closed it
            assert closed.termination_reason == "completed" and closed.evaluation is not None
            assert closed.reward == pytest.approx(1.0)

    asyncio.run(main())


@pytest.mark.parametrize(
    "parser,text",
    [
        ("hermes", 'I will check.\n<tool_call>\n{"name": "execute_command", "arguments": {"command": "echo parsed-ok"}}\n</tool_call>'),
        ("json", '```json\n{"name": "execute_command", "arguments": {"command": "echo parsed-ok"}}\n```'),
        ("react", 'Thought: check\nAction: execute_command\nAction Input: {"command": "echo parsed-ok"}'),
    ],
)
def test_raw_text_parsers(backend: Backend, parser: str, text: str) -> None:
    with gymserver.Client(backend.url) as c:
        with c.reset(backend.env) as s:
            r = s.step(text, parser=parser)
            assert "parsed-ok" in r.observation.text
            assert len(r.tool_calls) == 1
            call = r.tool_calls[0]
            assert call["function"]["name"] == "execute_command"
            assert json.loads(call["function"]["arguments"]) == {"command": "echo parsed-ok"}
            assert r.info["calls"][0]["exit_code"] == 0
            assistant = s.messages[-2]
            assert assistant["role"] == "assistant" and assistant["content"] == text
            assert assistant["tool_calls"][0]["id"] == call["id"] == s.messages[-1]["tool_call_id"]


def test_bad_actions_are_observations(backend: Backend) -> None:
    with gymserver.Client(backend.url) as c:
        with c.reset(backend.env) as s:
            r = s.step("<tool_call>{oops</tool_call>", parser="hermes")
            assert r.info["calls"][0]["error_class"] == "agent_error"
            assert r.observation.text and not r.terminated and not r.mask
            r = s.step("just thinking, no tool call")
            assert r.info["calls"][0]["error_class"] == "agent_error"
            assert s.messages[-1]["role"] == "user"  # the observation text is fed back
            r = s.step([{"name": "no_such_tool", "arguments": "{}"}])
            assert r.info["calls"][0]["error_class"] == "agent_error"


def test_server_errors_are_typed(backend: Backend) -> None:
    async def main() -> None:
        async with gymserver.AsyncClient(backend.url) as c:
            with pytest.raises(errors.NotFound) as ei:
                await c.reset("no_such_env")
            assert ei.value.code == "not_found" and ei.value.reason == "unknown_env" and not ei.value.mask
            with pytest.raises(errors.NotFound) as ei:
                await c.request("step", session="nope-123", tool_calls=[])
            assert ei.value.reason == "unknown_session"
            with pytest.raises(errors.InvalidArgument) as ei:
                await c.request("frobnicate")
            assert ei.value.reason == "unknown_op"
            s = await c.reset(backend.env)
            with pytest.raises(errors.InvalidArgument) as ei:
                await s.step("Action: x", parser="klingon")
            assert ei.value.reason == "unknown_parser"
            await s.close()
            with pytest.raises(errors.EpisodeDone) as ei:
                await s.step([echo_call("late")])
            assert ei.value.reason == "session_closed"
            # the connection survives every error
            assert (await c.hello())["protocol"] == 1

    asyncio.run(main())


def test_16_concurrent_sessions_async(backend: Backend) -> None:
    async def one(c: gymserver.AsyncClient, i: int) -> str:
        async with await c.reset(backend.env, seed=i) as s:
            r = await s.step([echo_call(f"s{i}")])
            assert f"s{i}" in r.observation.text
            # two pipelined steps on one session run in order
            a, b = await asyncio.gather(s.step([echo_call(f"a{i}")]), s.step([echo_call(f"b{i}")]))
            assert a.info["step"] == 2 and b.info["step"] == 3
            return s.id

    async def main() -> None:
        async with gymserver.AsyncClient(backend.url) as c:
            ids = await asyncio.gather(*(one(c, i) for i in range(16)))
            assert len(set(ids)) == 16
            assert c.sessions == []

    asyncio.run(main())


def test_sync_client_from_4_threads(backend: Backend) -> None:
    results: List[Any] = []
    with gymserver.Client(backend.url) as c:

        def worker(i: int) -> None:
            try:
                with c.reset(backend.env) as s:
                    for k in range(3):
                        r = s.step([echo_call(f"t{i}k{k}")])
                        assert f"t{i}k{k}" in r.observation.text
                results.append(s.id)
            except BaseException as e:  # surfaced below
                results.append(e)

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(300)
    assert len(results) == 4 and all(isinstance(r, str) for r in results), results
    assert len(set(results)) == 4


def test_sync_client_inside_running_loop(backend: Backend) -> None:
    async def main() -> str:
        # sync code called from a coroutine: must not deadlock or touch this loop
        with gymserver.Client(backend.url) as c:
            with c.reset(backend.env) as s:
                return s.step([echo_call("inloop")]).observation.text

    assert "inloop" in asyncio.run(main())


def test_request_timeout(backend: Backend) -> None:
    with gymserver.Client(backend.url) as c:
        with c.reset(backend.env) as s:
            slow = {"name": "execute_command", "arguments": {"command": "sleep 2"}}
            t0 = time.monotonic()
            with pytest.raises(errors.RequestTimeout) as ei:
                s.step([slow], timeout=0.3)
            assert time.monotonic() - t0 < 1.5
            assert isinstance(ei.value, TimeoutError)


def test_connect_errors() -> None:
    with pytest.raises(errors.ConnectionLost):
        gymserver.Client("ws://127.0.0.1:1", connect_timeout=5)


def _check_token_auth(url: str) -> None:
    """_check_token_auth expects a server whose token is "s3cret" to refuse no token and a wrong one."""
    with pytest.raises(errors.Unauthenticated) as ei:
        gymserver.Client(url)
    assert ei.value.code == "unauthenticated" and not ei.value.mask
    with pytest.raises(errors.Unauthenticated):
        gymserver.Client(url, token="wrong")
    with gymserver.Client(url, token="s3cret") as c:
        assert c.hello()["protocol"] == 1


def test_token_auth_fake() -> None:
    srv = FakeServer(token="s3cret").start()
    try:
        _check_token_auth(srv.url)
    finally:
        srv.stop()


def test_token_auth_live(live_env: dict) -> None:
    srv = start_live(live_env["binary"], live_env["config"], "--token", "s3cret")
    try:
        _check_token_auth(srv.url)
    finally:
        srv.stop()


async def _killed_server_scenario(url: str, kill: Any, solution_path: str) -> None:
    c = await gymserver.AsyncClient(url).connect()
    s, s2 = await asyncio.gather(c.reset("calculator_api"), c.reset("calculator_api"))
    slow = [{"name": "execute_command", "arguments": {"command": "sleep 30"}}]
    pending = [asyncio.ensure_future(s.step(slow)), asyncio.ensure_future(s2.step(slow))]
    await asyncio.sleep(1.0)
    kill()
    t0 = time.monotonic()
    results = await asyncio.wait_for(asyncio.gather(*pending, return_exceptions=True), timeout=30)
    assert time.monotonic() - t0 < 30
    for r in results:
        assert isinstance(r, errors.ConnectionLost), r
        assert r.mask and "lost" in str(r)
    with pytest.raises(errors.ConnectionLost):
        await s.step([])
    closed = await s.close()  # no raise: the server side is gone with the connection
    assert closed.termination_reason == "connection_lost"
    await c.close()


def test_killed_server_fake() -> None:
    srv = FakeServer().start()
    try:
        asyncio.run(_killed_server_scenario(srv.url, srv.kill, "app.py"))
    finally:
        srv.stop()


def test_killed_server_live(live_env: dict) -> None:
    srv = start_live(live_env["binary"], live_env["config"])
    try:
        asyncio.run(_killed_server_scenario(srv.url, lambda: srv.proc.send_signal(signal.SIGKILL), "/workspace/app.py"))
        srv.proc.wait(30)
    finally:
        srv.stop()
        # the SIGKILLed server left its sandboxes; the next server start reaps
        # containers whose owner is gone (DESIGN.md §3)
        reaper = start_live(live_env["binary"], live_env["config"])
        reaper.stop()


def test_sync_killed_server_fake() -> None:
    srv = FakeServer().start()
    try:
        c = gymserver.Client(srv.url)
        s = c.reset("calculator_api")
        err: List[BaseException] = []

        def stepper() -> None:
            try:
                s.step([{"name": "execute_command", "arguments": {"command": "sleep 30"}}])
            except BaseException as e:
                err.append(e)

        t = threading.Thread(target=stepper)
        t.start()
        time.sleep(0.3)
        srv.kill()
        t.join(20)
        assert not t.is_alive() and err and isinstance(err[0], errors.ConnectionLost)
        assert s.close().termination_reason == "connection_lost"
        c.close()
    finally:
        srv.stop()


def test_solution_constant_is_the_reference() -> None:
    assert "def calculate" in SOLUTION and "ThreadingHTTPServer" in SOLUTION
