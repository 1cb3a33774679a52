"""RemoteEnv (Gymnasium API) and the GRPO group helper, against both backends."""

from __future__ import annotations

import asyncio
import json
from typing import Any, Optional

import pytest

import gymserver
from gymserver import errors
from gymserver.grpo import group_advantages, run_group
from gymserver.gym import RemoteEnv, TextSpace
from conftest import SOLUTION, Backend


def test_remote_env_episode(backend: Backend) -> None:
    env = RemoteEnv(backend.env, url=backend.url, parser="hermes")
    try:
        assert env.observation_space.contains("any ünïcode text\n") and not env.action_space.contains(3)
        obs, info = env.reset(seed=3)
        obs2, info2 = env.reset(seed=3)  # same seed, same initial observation; old session closed
        assert obs == obs2 and info["session_id"] != info2["session_id"]
        assert isinstance(obs, str) and obs == info2["prompt"]
        assert {t["function"]["name"] for t in info2["tools"]} >= {"write_file"}
        text = '<tool_call>{"name": "write_file", "arguments": %s}</tool_call>' % json.dumps({"filepath": backend.solution_path, "content": SOLUTION})
        obs, reward, terminated, truncated, info = env.step(text)
        assert reward == 0.0 and not terminated and not truncated and info["tool_calls"]
        obs, reward, terminated, truncated, info = env.step([{"name": "mark_done", "arguments": {}}])
        assert terminated and reward == pytest.approx(1.0) and info["mask"] is False
        with pytest.raises(errors.EpisodeDone):
            env.step([{"name": "mark_done", "arguments": {}}])
        obs, info = env.reset()  # a new episode after the end
        assert obs
    finally:
        env.close()
        env.close()  # idempotent


def test_remote_env_np_random_seeding(fake_server: Any) -> None:
    env = RemoteEnv("calculator_api", url=fake_server.url)
    try:
        env.reset(seed=42)
        a = env.np_random.integers(0, 1000, 5).tolist()
        env.reset(seed=42)
        assert env.np_random.integers(0, 1000, 5).tolist() == a
    finally:
        env.close()


def test_text_space_sample() -> None:
    sp = TextSpace()
    assert sp.contains(sp.sample())


def test_group_advantages_math() -> None:
    adv = group_advantages([1.0, 0.0, 0.5, 0.9], [False, False, False, True], eps=0.0)
    vals = [1.0, 0.0, 0.5]
    mean = sum(vals) / 3
    std = (sum((v - mean) ** 2 for v in vals) / 3) ** 0.5
    assert adv[:3] == pytest.approx([(v - mean) / std for v in vals])
    assert adv[3] == 0.0
    assert group_advantages([1.0, 1.0]) == [0.0, 0.0]
    assert group_advantages([1.0], [True]) == [0.0]


def test_grpo_group(backend: Backend) -> None:
    async def policy(session: gymserver.AsyncSession, last: Optional[gymserver.StepResult]) -> Any:
        # run_group tells each policy call its member index: even members solve, member 3's model fails
        k = session.group_index
        assert k is not None and 0 <= k < 4
        turn = sum(1 for m in session.messages if m["role"] == "assistant")
        if k == 3:
            raise RuntimeError("model API down")
        if turn == 0:
            content = SOLUTION if k % 2 == 0 else "print('nothing')\n"
            return [{"name": "write_file", "arguments": {"filepath": backend.solution_path, "content": content}}]
        return '{"name": "mark_done", "arguments": {}}' if turn == 1 else None

    async def main() -> None:
        async with gymserver.AsyncClient(backend.url) as c:
            g = await run_group(c, backend.env, policy, n=4, seed=11, parser="json", max_turns=5)
            assert len(g.rollouts) == 4 and c.sessions == []
            assert g.mask == [False, False, False, True]
            masked = g.rollouts[3]
            assert masked.error_class == "policy_error" and masked.advantage == 0.0
            assert g.rewards[:3] == pytest.approx([1.0, 0.0, 1.0])
            valid = g.valid
            assert sorted(r.reward for r in valid) == pytest.approx([0.0, 1.0, 1.0])
            assert g.mean == pytest.approx(2 / 3)
            for r in valid:
                assert r.terminated and r.messages[-1]["role"] == "tool"
                assert (r.advantage > 0) == (r.reward == 1.0)
            assert sum(r.advantage for r in valid) == pytest.approx(0.0, abs=1e-6)

    asyncio.run(main())
