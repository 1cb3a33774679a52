"""Stand-in for ``llamagym.agent`` (LlamaGym 92d7827bc11a53441dcd6bcb4d2ddc6daeb542e0, ``llamagym/agent.py``).

It mirrors upstream's ``Agent`` class: an ``ABC`` whose constructor is
``(model, tokenizer, device, generate_config_dict=None, ppo_config_dict=None)``,
with the abstract ``get_system_prompt``, ``format_observation(observation)``
and ``extract_action(response)``, and the concrete ``llm(messages)``,
``act(observation)``, ``assign_reward(reward)``,
``format_episode_for_ppo(messages, rewards)``, ``terminate_episode(train=True)``
and ``train_batch(batch_queries, batch_responses, batch_rewards)``.

Upstream's constructor builds TRL's ``PPOConfig`` / ``PPOTrainer`` /
``create_reference_model`` (TRL 0.7.x API, gone since TRL 0.12), and its
concrete methods drive that trainer. The gymserver adapter must therefore
override every one of them and never call them: here each raises
AssertionError, so a test fails if the adapter falls through to upstream's
implementation. The real file is exercised by the twin test
(``test_twin_real_upstream_agent``), which loads it from the mirror.
"""

from abc import ABC, abstractmethod
from typing import Dict, List


def _upstream_only(name: str) -> AssertionError:
    return AssertionError(f"llamagym stand-in: upstream Agent.{name} was called; it needs TRL's old PPOTrainer, the adapter must override it")


class Agent(ABC):
    """Agent mirrors ``llamagym.agent.Agent`` at 92d7827b (signatures only; see the module docstring)."""

    def __init__(self, model, tokenizer, device, generate_config_dict=None, ppo_config_dict=None):
        raise _upstream_only("__init__")

    @abstractmethod
    def get_system_prompt(self) -> str:
        """get_system_prompt is abstract upstream."""

    @abstractmethod
    def format_observation(self, observation) -> str:
        """format_observation is abstract upstream (observation: gymnasium ObsType)."""

    @abstractmethod
    def extract_action(self, response: str):
        """extract_action is abstract upstream (returns a gymnasium ActType)."""

    def llm(self, messages: List[Dict[str, str]]) -> str:
        """llm: upstream renders the chat template and calls model.generate."""
        raise _upstream_only("llm")

    def act(self, observation):
        """act: upstream appends the user message, calls llm and extract_action (None on an exception)."""
        raise _upstream_only("act")

    def assign_reward(self, reward):
        """assign_reward: upstream appends to current_episode_rewards."""
        raise _upstream_only("assign_reward")

    def format_episode_for_ppo(self, messages, rewards):
        """format_episode_for_ppo: upstream returns (queries, responses, rewards) tensors per turn."""
        raise _upstream_only("format_episode_for_ppo")

    def terminate_episode(self, train=True):
        """terminate_episode: upstream batches the episode and trains when the batch is full."""
        raise _upstream_only("terminate_episode")

    def train_batch(self, batch_queries, batch_responses, batch_rewards):
        """train_batch: upstream calls PPOTrainer.step on batch_size turns."""
        raise _upstream_only("train_batch")
