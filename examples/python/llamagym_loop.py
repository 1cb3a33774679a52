"""A LlamaGym-style online loop on gymserver: Agent + RemoteEnv, training hook every batch.

    PYTHONPATH=clients/python python3 examples/python/llamagym_loop.py ws://127.0.0.1:8080

The "model" here is a scripted stand-in (it writes the reference solution and marks done) so the
loop runs anywhere; replace ``generate`` with your model (HF pipeline, vLLM, an API) and override
``Agent.train`` with your PPO/GRPO step.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any, Dict, List

from gymserver.adapters.llamagym import Agent, run_episode
from gymserver.gym import RemoteEnv

ROOT = Path(__file__).resolve().parents[2]
SOLUTION = (ROOT / "examples/calculator_api/solution/app.py").read_text()


class CalculatorAgent(Agent):
    """CalculatorAgent prompts for Hermes-style tool calls and lets the server parse them."""

    def get_system_prompt(self) -> str:
        """get_system_prompt describes the tool-call format."""
        return 'You are a software engineer. Call tools as <tool_call>{"name": ..., "arguments": {...}}</tool_call>.'

    def format_observation(self, observation: Any) -> str:
        """format_observation passes the text observation through."""
        return str(observation)

    def extract_action(self, response: str) -> Any:
        """extract_action sends the raw reply; the server parses it (parser="hermes")."""
        return response


def scripted_model(messages: List[Dict[str, Any]]) -> str:
    """scripted_model writes the solution on the first turn and marks done on the second."""
    turn = sum(1 for m in messages if m["role"] == "assistant")
    if turn == 0:
        return "<tool_call>%s</tool_call>" % json.dumps({"name": "write_file", "arguments": {"filepath": "/workspace/app.py", "content": SOLUTION}})
    return '<tool_call>{"name": "mark_done", "arguments": {}}</tool_call>'


def main() -> None:
    """main runs four episodes with a training hook every two."""
    url = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("GYMSERVER_URL", "ws://127.0.0.1:8080")
    agent = CalculatorAgent(scripted_model, batch_size=2)
    env = RemoteEnv("calculator_api", url=url, parser="hermes", token=os.environ.get("GYMSERVER_TOKEN"))
    try:
        for episode in range(4):
            stats = run_episode(env, agent, seed=episode)
            print(f"episode {episode}: reward {stats['reward']:.2f} steps {stats['steps']} train {stats['train_stats']}")
    finally:
        env.close()


if __name__ == "__main__":
    main()
