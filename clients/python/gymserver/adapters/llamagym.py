"""LlamaGym-style agent running on a gymserver :class:`~gymserver.gym.RemoteEnv`.

LlamaGym's ``Agent`` keeps the chat of the current episode, turns each
observation into a user message (``format_observation``), asks the model
(``act``), turns the reply into an env action (``extract_action``), collects
rewards (``assign_reward``) and, at the end of an episode
(``terminate_episode``), hands finished episodes to a training step once a
batch is full. Here the model is any callable ``generate(messages) -> str``
(an HF pipeline, vLLM, an OpenAI-compatible endpoint) and the training step
is the overridable :meth:`Agent.train`, so the loop runs without LlamaGym or
TRL's PPO installed::

    class CalcAgent(Agent):
        def get_system_prompt(self): return "You are a careful engineer. Use tools."
        def format_observation(self, obs): return obs
        def extract_action(self, response): return response  # raw text, parsed by the server

    agent = CalcAgent(generate=my_model)
    env = RemoteEnv("calculator_api", url="ws://gym:8080", parser="hermes")
    stats = run_episode(env, agent, seed=0)
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Callable, Dict, List, Optional

from ..gym import RemoteEnv

__all__ = ["Agent", "run_episode"]

#: Generate is the model: chat messages in, assistant text out.
Generate = Callable[[List[Dict[str, Any]]], str]


class Agent(ABC):
    """Agent is a LlamaGym-style agent: subclass it and implement the three prompt hooks.

    Args:
        generate: the model, ``generate(messages) -> str``.
        batch_size: finished episodes collected before :meth:`train` runs.
        tools: tool schemas to expose in the system message (optional; set
            by :func:`run_episode` from the env's reset info).
    """

    def __init__(self, generate: Generate, batch_size: int = 8) -> None:
        self.generate = generate
        self.batch_size = batch_size
        self.tools: List[Dict[str, Any]] = []
        self.current_episode_messages: List[Dict[str, Any]] = [{"role": "system", "content": self.get_system_prompt()}]
        self.current_episode_rewards: List[float] = []
        self.current_batch: Dict[str, List[Any]] = {"messages": [], "rewards": []}
        self.train_calls = 0

    @abstractmethod
    def get_system_prompt(self) -> str:
        """get_system_prompt returns the system message of every episode."""

    @abstractmethod
    def format_observation(self, observation: Any) -> str:
        """format_observation turns an env observation into the user message text."""

    @abstractmethod
    def extract_action(self, response: str) -> Any:
        """extract_action turns the model's reply into an env action (raw text or tool calls)."""

    def llm(self, messages: List[Dict[str, Any]]) -> str:
        """llm calls the model; override to add sampling settings."""
        return self.generate(messages)

    def act(self, observation: Any) -> Any:
        """act records the observation, asks the model and returns the extracted action."""
        self.current_episode_messages.append({"role": "user", "content": self.format_observation(observation)})
        response = self.llm(self.current_episode_messages)
        self.current_episode_messages.append({"role": "assistant", "content": response})
        return self.extract_action(response)

    def assign_reward(self, reward: float) -> None:
        """assign_reward records the reward of the last action."""
        self.current_episode_rewards.append(float(reward))

    def terminate_episode(self, train: bool = True) -> Dict[str, Any]:
        """terminate_episode closes the episode; with ``train`` it calls :meth:`train` once a batch is full.

        Returns the training statistics (empty when no training ran).
        """
        self.current_batch["messages"].append(self.current_episode_messages)
        self.current_batch["rewards"].append(sum(self.current_episode_rewards))
        self.current_episode_messages = [{"role": "system", "content": self.get_system_prompt()}]
        self.current_episode_rewards = []
        if not train or len(self.current_batch["messages"]) < self.batch_size:
            return {}
        batch, self.current_batch = self.current_batch, {"messages": [], "rewards": []}
        self.train_calls += 1
        return self.train(batch["messages"], batch["rewards"])

    def train(self, episodes: List[List[Dict[str, Any]]], rewards: List[float]) -> Dict[str, Any]:
        """train is the training step on a full batch; override it (LlamaGym runs PPO here).

        The default returns the batch's mean reward and does not train.
        """
        return {"episodes": len(episodes), "mean_reward": sum(rewards) / max(len(rewards), 1)}


def run_episode(env: RemoteEnv, agent: Agent, *, seed: Optional[int] = None, max_steps: int = 50, train: bool = True) -> Dict[str, Any]:
    """run_episode plays one episode of ``env`` with ``agent`` the LlamaGym way and returns a summary.

    The summary has ``reward`` (sum), ``steps``, ``terminated``,
    ``truncated``, ``mask`` and ``train_stats``. An episode that reaches
    ``max_steps`` is evaluated so it still gets the tests' reward.
    """
    observation, info = env.reset(seed=seed)
    agent.tools = list(info.get("tools") or [])
    steps, terminated, truncated, mask = 0, False, False, False
    while steps < max_steps:
        action = agent.act(observation)
        observation, reward, terminated, truncated, step_info = env.step(action)
        agent.assign_reward(reward)
        mask = mask or bool(step_info.get("mask"))
        steps += 1
        if terminated or truncated:
            break
    if not (terminated or truncated):
        agent.assign_reward(env.evaluate().reward)
    total = sum(agent.current_episode_rewards)
    stats = agent.terminate_episode(train=train)
    return {"reward": total, "steps": steps, "terminated": terminated, "truncated": truncated, "mask": mask, "train_stats": stats}
