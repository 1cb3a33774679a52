"""Stand-in for ``skyrl_gym.envs.base_text_env`` (SkyRL a9564572, ``skyrl-gym/skyrl_gym/envs/base_text_env.py``).

``BaseTextEnv.__init__`` sets ``turns``, ``max_turns``, ``tool_groups`` and
``tool_to_toolgroup``; ``init`` returns the prompt and ``{}``;
``get_metrics`` returns ``{}``; ``aggregate_metrics`` averages.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple, TypedDict

from skyrl_gym import Env

MessageType = Dict[str, str]
ConversationType = List[MessageType]


class BaseTextEnvStepOutput(TypedDict):
    """BaseTextEnvStepOutput is a text env's step result (observations are OpenAI-format messages)."""

    observations: ConversationType
    reward: float
    done: bool
    metadata: Dict[str, Any]
    postprocessed_action: Optional[str]


class BaseTextEnv(Env[ConversationType, str]):
    """BaseTextEnv is the base of text-in, text-out environments."""

    def __init__(self) -> None:
        super().__init__()
        self.turns = 0
        self.max_turns = 1
        self.tool_groups: List[Any] = []
        self.tool_to_toolgroup: Dict[str, Any] = {}

    def step(self, action: str) -> BaseTextEnvStepOutput:  # type: ignore[override]
        """step runs one turn (upstream's base returns None)."""
        pass  # type: ignore[return-value]

    def init(self, prompt: ConversationType) -> Tuple[ConversationType, Dict[str, Any]]:  # type: ignore[override]
        """init returns the first chat for the model and metadata."""
        return prompt, {}

    def close(self) -> None:
        """close releases the environment."""
        pass

    def get_metrics(self) -> Dict[str, Any]:
        """get_metrics returns the episode's metrics."""
        return {}

    @staticmethod
    def aggregate_metrics(metrics: List[Dict[str, Any]]) -> Dict[str, Any]:
        """aggregate_metrics averages the numeric metrics of many episodes."""
        from skyrl_gym.metrics import default_aggregate_metrics

        return default_aggregate_metrics(metrics)
