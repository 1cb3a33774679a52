"""Stand-in for ``skyrl_gym.core`` (SkyRL a9564572, ``skyrl-gym/skyrl_gym/core.py``).

``Env`` has ``step``, ``init`` and ``close``; ``skyrl_gym.make`` sets an
``EnvSpec`` on every instance as ``env.spec``.
"""

from __future__ import annotations

from typing import Any, Dict, Generic, Optional, SupportsFloat, Tuple, TypedDict, TypeVar

ObsType = TypeVar("ObsType")
ActType = TypeVar("ActType")


class EnvStepOutput(TypedDict):
    """EnvStepOutput is what ``Env.step`` returns."""

    observations: Any
    reward: SupportsFloat
    done: bool
    metadata: Optional[Dict[str, Any]]


class Env(Generic[ObsType, ActType]):
    """Env is the base class of every skyrl_gym environment."""

    def step(self, action: ActType) -> EnvStepOutput:
        """step applies one action."""
        raise NotImplementedError

    def init(self, *kwargs: Any) -> Tuple[ObsType, Dict[str, Any]]:
        """init returns the first observation and metadata."""
        raise NotImplementedError

    def close(self) -> None:
        """close releases the environment; closing twice has no effect."""

    def __enter__(self) -> "Env":
        return self

    def __exit__(self, *args: Any) -> bool:
        self.close()
        return False
