"""Step through one calculator_api episode by hand with the sync client.

    gymserver serve --config examples/calculator_api/config.json --addr 127.0.0.1:8080 &
    PYTHONPATH=clients/python python3 examples/python/step_by_hand.py ws://127.0.0.1:8080

It writes the task's reference solution, calls mark_done and prints the reward (1.0).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from gymserver import Client

ROOT = Path(__file__).resolve().parents[2]


def main() -> None:
    """main runs the episode."""
    url = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("GYMSERVER_URL", "ws://127.0.0.1:8080")
    solution = (ROOT / "examples/calculator_api/solution/app.py").read_text()
    with Client(url, token=os.environ.get("GYMSERVER_TOKEN")) as client:
        with client.reset("calculator_api", seed=0) as session:
            print("task:", session.prompt[:200], "...")
            print("tools:", [t["function"]["name"] for t in session.tools])
            r = session.step([{"name": "execute_command", "arguments": {"command": "ls -la"}}])
            print(r.observation.text)
            r = session.step('<tool_call>{"name": "read_file", "arguments": {"filepath": "app.py"}}</tool_call>', parser="hermes")
            print(r.observation.text[:300])
            session.step([{"name": "write_file", "arguments": {"filepath": "/workspace/app.py", "content": solution}}])
            r = session.step([{"name": "mark_done", "arguments": {"message": "done"}}])
            print("terminated:", r.terminated, "reward:", r.reward)
            if r.evaluation:
                print(f"tests: {r.evaluation.passed}/{r.evaluation.total} passed")


if __name__ == "__main__":
    main()
