"""Trainer adapters, driven the way each trainer drives them, against both backends."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace
from typing import Any, Dict, List

import pytest

from gymserver.adapters import _shared
from conftest import SOLUTION, Backend


def solution_text(b: Backend) -> str:
    return '<tool_call>%s</tool_call>' % json.dumps({"name": "write_file", "arguments": {"filepath": b.solution_path, "content": SOLUTION}})


DONE = '<tool_call>{"name": "mark_done", "arguments": {}}</tool_call>'


class CharTokenizer:
    """CharTokenizer is a toy HF-like tokenizer: one token per character."""

    def apply_chat_template(self, messages: List[Dict[str, Any]], tools: Any = None, add_generation_prompt: bool = False, tokenize: bool = True, **kw: Any) -> List[int]:
        text = "".join(f"<{m.get('role', 'system')}>{m.get('content', '')}" for m in messages)
        if add_generation_prompt:
            text += "<assistant>"
        return [ord(c) for c in text]

    def decode(self, ids: List[int], skip_special_tokens: bool = True) -> str:
        return "".join(chr(i) for i in ids)

    def __call__(self, text: str, add_special_tokens: bool = False, return_tensors: Any = None) -> Dict[str, List[int]]:
        return {"input_ids": [ord(c) for c in text]}


@pytest.fixture(autouse=True)
def _fresh_shared_clients() -> Any:
    yield
    _shared.close_shared()


def test_trl_environment_factory(backend: Backend) -> None:
    from gymserver.adapters.trl import gymserver_reward, gymserver_reward_async, tool_env_factory

    Env = tool_env_factory(url=backend.url, env=backend.env)
    # what TRL exposes as tools: public methods except reset
    import inspect

    inst = Env()
    tools = sorted(n for n, m in inspect.getmembers(inst, inspect.ismethod) if not n.startswith("_") and n != "reset")
    assert tools == ["execute_command", "mark_done", "read_file", "write_file"]
    for n in tools:
        assert "Args:" in getattr(Env, n).__doc__ or n == "mark_done"
    envs = [inst, Env(), Env()]
    for e in envs:
        assert e.reset(prompt="p") is None
    envs[0].write_file(backend.solution_path, SOLUTION)
    assert "Marked" in envs[0].mark_done() or envs[0].done
    envs[1].write_file(backend.solution_path, SOLUTION)  # not marked done: evaluated by the reward function
    assert "hi" in envs[2].execute_command("echo hi")
    rewards = gymserver_reward(["c0", "c1", "c2"], environments=envs)
    assert rewards[0] == pytest.approx(1.0) and rewards[1] == pytest.approx(1.0) and rewards[2] < 1.0
    # async variant, batched
    for e in envs:
        e.reset(task=None)
    envs[2].write_file(backend.solution_path, SOLUTION)
    rewards = asyncio.run(gymserver_reward_async(["a", "b", "c"], environments=envs))
    assert rewards[0] < 1.0 and rewards[1] < 1.0 and rewards[2] == pytest.approx(1.0)
