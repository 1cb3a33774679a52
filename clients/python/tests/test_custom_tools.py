"""Custom tools (config ``tools``) against a real ``gymserver serve`` on Docker.

The server runs ``envs/testdata/custom_tools/config.json``: word_count and
wait run scripts, echo_args a shell string, and task "capped" (3 actions)
adds shout. For the client they are just tools: listed in ``envs`` and
``reset``, called by structured call or raw text with any parser.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from pathlib import Path
from typing import Any, Dict, Iterator, List

import pytest

import gymserver
from gymserver.gym import RemoteEnv
from conftest import REPO, LiveServer, start_live

CONFIG = REPO / "envs" / "testdata" / "custom_tools" / "config.json"
ENV = "custom_tools"
STANDARD = ["execute_command", "write_file", "read_file", "mark_done"]
CUSTOM = ["word_count", "wait", "echo_args"]
WORDS = '{"path": "poem.txt", "words": 11}'
HOSTILE = "$(touch /tmp/pwned1); `touch /tmp/pwned2` && touch /tmp/pwned3 | sh -c 'touch /tmp/pwned4'\n\"; touch /tmp/pwned5"


@pytest.fixture(scope="module")
def tools_server(live_env: Dict[str, Path]) -> Iterator[LiveServer]:
    """tools_server is a real server of the custom tools config."""
    srv = start_live(live_env["binary"], CONFIG)
    with gymserver.Client(srv.url) as c:
        instance = c.server_info["instance"]
    try:
        yield srv
    finally:
        srv.stop()
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


def _names(tools: List[Dict[str, Any]]) -> List[str]:
    return [t["function"]["name"] for t in tools]


def test_schemas_in_envs_and_reset(tools_server: LiveServer) -> None:
    with gymserver.Client(tools_server.url) as c:
        env = next(e for e in c.envs() if e["id"] == ENV)
        assert _names(env["tools"]) == STANDARD + CUSTOM
        wc = env["tools"][4]["function"]
        assert wc["description"] == "Count the words of a text file."
        assert wc["parameters"]["required"] == ["path"] and wc["parameters"]["properties"]["path"]["type"] == "string"
        assert wc["parameters"]["additionalProperties"] is False
        with c.reset(ENV, task="count") as s:
            assert _names(s.tools) == STANDARD + CUSTOM
        with c.reset(ENV, task="capped") as s:
            assert _names(s.tools) == STANDARD + CUSTOM + ["shout"]


@pytest.mark.parametrize(
    "parser,text",
    [
        ("hermes", '<tool_call>{"name": "word_count", "arguments": {"path": "poem.txt"}}</tool_call>'),
        ("json", '```json\n{"name": "word_count", "arguments": {"path": "poem.txt"}}\n```'),
        ("react", 'Thought: count.\nAction: word_count\nAction Input: {"path": "poem.txt"}'),
    ],
)
def test_call_by_parser(tools_server: LiveServer, parser: str, text: str) -> None:
    with gymserver.Client(tools_server.url) as c:
        with c.reset(ENV, task="count", parser=parser) as s:
            r = s.step(text)
            assert WORDS in r.observation.text
            assert [tc["function"]["name"] for tc in r.tool_calls] == ["word_count"]
            call = r.info["calls"][0]
            assert call["name"] == "word_count" and call["exit_code"] == 0 and not call.get("error_class")
            assert r.info["actions"] == 1


def test_structured_output_timeout_and_count(tools_server: LiveServer) -> None:
    with gymserver.Client(tools_server.url) as c:
        with c.reset(ENV, task="count") as s:
            r = s.step({"name": "word_count", "arguments": {"path": "poem.txt"}})
            assert WORDS in r.observation.text and r.info["actions"] == 1
            msg = r.observation.messages[0]
            assert msg["role"] == "tool" and msg["name"] == "word_count"
            # A failing command: its exit code and stderr, not an error.
            r = s.step([{"name": "word_count", "arguments": {"path": "nope.txt"}}])
            call = r.info["calls"][0]
            assert call["exit_code"] == 2 and not call.get("error_class")
            assert "stderr:\nword_count: nope.txt: No such file or directory" in r.observation.text
            # Arguments the schema refuses: an agent error, still an action.
            r = s.step({"name": "word_count", "arguments": {"path": 3}})
            assert r.info["calls"][0]["error_class"] == "agent_error"
            assert 'argument "path" must be a string, got a number' in r.observation.text
            # The tool's own timeout (1s), shorter than the command timeout.
            start = time.monotonic()
            r = s.step({"name": "wait", "arguments": {"seconds": 30}})
            assert r.info["calls"][0]["error_class"] == "tool_timeout"
            assert r.observation.text.startswith("Timed out after 1s") and time.monotonic() - start < 10
            assert r.info["actions"] == 4 and not r.done
            # Two calls in one step, then the task is done: tools are actions like any other.
            r = s.step(
                [
                    {"name": "write_file", "arguments": {"filepath": "count.txt", "content": "11\n"}},
                    {"name": "mark_done", "arguments": {}},
                ]
            )
            assert r.terminated and r.reward == 1.0 and r.info["actions"] == 6


def test_hostile_argument_not_executed(tools_server: LiveServer) -> None:
    with gymserver.Client(tools_server.url) as c:
        with c.reset(ENV, task="count") as s:
            r = s.step({"name": "echo_args", "arguments": {"text": HOSTILE}})
            assert json.loads(r.observation.text.split("stdout:\n", 1)[1]) == {"text": HOSTILE}
            r = s.step({"name": "word_count", "arguments": {"path": HOSTILE}})
            assert r.info["calls"][0]["exit_code"] == 2
            r = s.step('<tool_call>{"name": "echo_args", "arguments": ' + json.dumps({"text": HOSTILE}) + "}</tool_call>", parser="hermes")
            assert r.info["calls"][0]["exit_code"] == 0
            r = s.step({"name": "execute_command", "arguments": {"command": "ls -a /tmp"}})
            assert "pwned" not in r.observation.text


def test_action_cap_async(tools_server: LiveServer) -> None:
    async def main() -> None:
        async with gymserver.AsyncClient(tools_server.url) as c:
            s = await c.reset(ENV, task="capped")
            try:
                r = await s.step(
                    [
                        {"name": "shout", "arguments": {"text": "so much"}},
                        {"name": "word_count", "arguments": {"path": "poem.txt"}},
                        {"name": "shout", "arguments": {"text": "depends"}},
                        {"name": "shout", "arguments": {"text": "too late"}},
                    ]
                )
                assert r.truncated and r.termination_reason == "max_actions" and r.info["actions"] == 3
                assert "SO MUCH" in r.observation.text and "DEPENDS" in r.observation.text
                assert "TOO LATE" not in r.observation.text
                assert r.info["calls"][3]["error_class"] == "episode_done"
            finally:
                await s.close()

    asyncio.run(main())


def test_remote_env(tools_server: LiveServer) -> None:
    env = RemoteEnv(ENV, "count", url=tools_server.url, parser="react")
    try:
        _, info = env.reset()
        assert _names(info["tools"]) == STANDARD + CUSTOM
        obs, reward, terminated, truncated, info = env.step('Action: word_count\nAction Input: {"path": "poem.txt"}')
        assert WORDS in obs and not terminated and not truncated and info["actions"] == 1
    finally:
        env.close()
