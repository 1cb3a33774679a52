"""Online PPO of a small chat model on gymserver with LlamaGym's Agent (plain PyTorch PPO step).

    gymserver serve --config examples/calculator_api/config.json &          # ws://127.0.0.1:8080
    pip install torch transformers
    PYTHONPATH=clients/python python3 examples/llamagym/train.py ws://127.0.0.1:8080 Qwen/Qwen2.5-0.5B-Instruct

Each episode is LlamaGym's loop (act → step → assign_reward) through
``run_episode``, which also puts the server's tool schemas into the system
message, drops masked episodes (infrastructure failures) from training and
closes the session. ``terminate_episode`` runs a PPO step every
``batch_size`` turns and its statistics are printed.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from gymserver.adapters.llamagym import Agent, run_episode
from gymserver.gym import RemoteEnv


class CalculatorAgent(Agent):
    """CalculatorAgent sends the model's reply as is: the server parses its <tool_call> blocks."""

    def get_system_prompt(self) -> str:
        """get_system_prompt is the task-independent instruction; the tools are appended by the adapter."""
        return "You are an expert software engineer working in a sandbox. Use the tools, then call mark_done."

    def format_observation(self, observation: Any) -> str:
        """format_observation passes the task prompt and the tool results through."""
        return str(observation)

    def extract_action(self, response: str) -> Any:
        """extract_action returns the raw reply (RemoteEnv's parser="hermes" finds the calls)."""
        return response


def main() -> None:
    """main trains for 100 episodes of calculator_api."""
    url = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("GYMSERVER_URL", "ws://127.0.0.1:8080")
    name = sys.argv[2] if len(sys.argv) > 2 else "Qwen/Qwen2.5-0.5B-Instruct"
    device = "cuda" if torch.cuda.is_available() else "cpu"
    tokenizer = AutoTokenizer.from_pretrained(name)
    model = AutoModelForCausalLM.from_pretrained(name).to(device)
    agent = CalculatorAgent(
        model,
        tokenizer,
        device,
        {"max_new_tokens": 1024, "do_sample": True, "temperature": 0.8, "top_p": 0.95, "top_k": 0},
        {"batch_size": 8, "mini_batch_size": 2, "gradient_accumulation_steps": 2, "ppo_epochs": 2, "learning_rate": 1e-6},
    )
    env = RemoteEnv("calculator_api", url=url, parser="hermes", token=os.environ.get("GYMSERVER_TOKEN"))
    try:
        for episode in range(100):
            stats = run_episode(env, agent, max_steps=20)
            line = f"episode {episode}: reward {stats['reward']:.2f} steps {stats['steps']} {stats['termination_reason']}"
            if stats["mask"]:
                line += " (masked: not trained on)"
            if stats["train_stats"]:
                line += f" | ppo loss {stats['train_stats']['ppo/loss/total']:.4f} kl {stats['train_stats']['objective/kl']:.4f}"
            print(line, flush=True)
    finally:
        env.close()


if __name__ == "__main__":
    main()
