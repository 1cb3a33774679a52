"""GRPO rollouts: a group of N episodes of one task, one seed, driven by an OpenAI-compatible model.

    PYTHONPATH=clients/python python3 examples/python/grpo_rollouts.py \
        --url ws://127.0.0.1:8080 --base-url https://openrouter.ai/api/v1 --model qwen/qwen3-coder -n 8

The model uses native tool calling (the session's tool schemas); the API key comes from
OPENAI_API_KEY or OPENROUTER_API_KEY. Uses the ``openai`` package when installed, else urllib.
Prints rewards, group-normalised advantages and which samples are masked (infrastructure errors).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import urllib.request
from typing import Any, Dict, List, Optional

from gymserver import AsyncClient, AsyncSession, StepResult
from gymserver.grpo import run_group


def chat(base_url: str, api_key: str, model: str, messages: List[Dict[str, Any]], tools: List[Dict[str, Any]]) -> Dict[str, Any]:
    """chat calls /chat/completions and returns the assistant message (blocking)."""
    try:
        import openai  # optional

        client = openai.OpenAI(base_url=base_url, api_key=api_key)
        resp = client.chat.completions.create(model=model, messages=messages, tools=tools)
        return resp.choices[0].message.model_dump(exclude_none=True)
    except ImportError:
        body = json.dumps({"model": model, "messages": messages, "tools": tools}).encode()
        req = urllib.request.Request(
            base_url.rstrip("/") + "/chat/completions",
            data=body,
            headers={"Authorization": f"Bearer {api_key}", "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=300) as r:
            return json.load(r)["choices"][0]["message"]


def main() -> None:
    """main runs one group and prints its statistics."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", default=os.environ.get("GYMSERVER_URL", "ws://127.0.0.1:8080"))
    ap.add_argument("--env", default="calculator_api")
    ap.add_argument("--task", default=None)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("-n", type=int, default=8)
    ap.add_argument("--max-turns", type=int, default=30)
    ap.add_argument("--base-url", default=os.environ.get("OPENAI_BASE_URL", "https://openrouter.ai/api/v1"))
    ap.add_argument("--model", default="qwen/qwen3-coder")
    args = ap.parse_args()
    api_key = os.environ.get("OPENAI_API_KEY") or os.environ.get("OPENROUTER_API_KEY") or ""

    async def policy(session: AsyncSession, last: Optional[StepResult]) -> Any:
        msg = await asyncio.to_thread(chat, args.base_url, api_key, args.model, session.messages, session.tools)
        calls = msg.get("tool_calls") or []
        # a turn without a tool call is sent as text: the server answers with an agent_error observation
        return {"content": msg.get("content") or "", "tool_calls": calls} if calls else (msg.get("content") or "")

    async def run() -> None:
        async with AsyncClient(args.url, token=os.environ.get("GYMSERVER_TOKEN")) as client:
            g = await run_group(client, args.env, policy, n=args.n, task=args.task, seed=args.seed, max_turns=args.max_turns)
        print(f"mean {g.mean:.3f} std {g.std:.3f}")
        for r in g.rollouts:
            flag = f"MASKED ({r.error_class}: {r.error[:80]})" if r.masked else ""
            print(f"#{r.index} reward {r.reward:.2f} advantage {r.advantage:+.2f} steps {r.steps} {r.termination_reason} {flag}")

    asyncio.run(run())


if __name__ == "__main__":
    main()
